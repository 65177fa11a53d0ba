"""The DeiT-B baseline of Table 9 on SSv2 (57.6): timesformer_deit_vitb_k400.py on SSv2's
data."""
_base_ = ['./timesformer_deit_vitb_k400.py', '../_base_/video/sthv2.py']

model = dict(cls_head=dict(num_classes=_base_.sthv2_num_classes))
train_dataloader = _base_.sthv2_train_dataloader
val_dataloader = _base_.sthv2_val_dataloader
test_dataloader = _base_.sthv2_test_dataloader
