# tools/study.py, the pixel-codebook baseline of Table 2: the same MIM pretraining with the
# lambda = 0 tokenizer's codes as targets.
_base_ = './pretrain_peco_world.py'
model = dict(target_generator=dict(checkpoint='work_dirs/study/tokenizer_lambda0/iter_400.pth'))
