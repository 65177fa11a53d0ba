# tools/study.py, Table 10's sweep: tokenizer_world.py with perceptual weight lambda = 3.
_base_ = './tokenizer_world.py'
model = dict(perceptual_weight=3)
