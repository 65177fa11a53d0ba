"""TimeSformer on PeCo's ViT-B/16, Something-Something v2 (PeCo appendix, Table 9: 61.8 top-1;
BEiT 60.2, DeiT-B 57.6): the Kinetics-400 recipe (timesformer_vitb_k400.py) on SSv2's
174 classes and 8 uniformly sampled frames (configs/_base_/video/sthv2.py)."""
_base_ = ['./timesformer_vitb_k400.py', '../_base_/video/sthv2.py']

model = dict(cls_head=dict(num_classes=_base_.sthv2_num_classes))
train_dataloader = _base_.sthv2_train_dataloader
val_dataloader = _base_.sthv2_val_dataloader
test_dataloader = _base_.sthv2_test_dataloader
