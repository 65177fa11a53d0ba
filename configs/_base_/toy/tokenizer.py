# What the toy-scale tokenizers share (configs/demo/tokenizer_tiny_photos.py and
# configs/study/tokenizer_world.py, with their lambda variants): the PeCo recipe of
# configs/peco/tokenizer_vqvae_in1k.py (EMA VQ-VAE, pixel + perceptual loss, Adam (0.5, 0.95))
# with K = 128 codes of D = 32, the perceptual loss on blocks 1-4 of a 4-block toy ViT (standing
# in for blocks 3/6/9/12 of 12), lr 1e-3, iteration-based, on image folders. A run names its
# data, its CNN (its downsampling), its perceptual network, its evaluation and its schedule.
_base_ = '../../peco/tokenizer_vqvae_in1k.py'

num_embeddings = 128
model = dict(
    quantizer=dict(num_embeddings=num_embeddings, embed_dims=32, decay=0.9),
    perceptual=dict(layers=(1, 2, 3, 4), vit_cfg=dict(num_heads=4)))
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
train_dataloader = dict(
    # an endless shuffled stream: mmengine's IterBasedTrainLoop restarts a finite one at
    # every epoch end with a 2 s pause and a warning
    sampler=dict(type='InfiniteSampler', shuffle=True), num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_prefix='train'))
test_dataloader = dict(
    num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', pipeline=test_pipeline))
test_evaluator = dict(num_embeddings=num_embeddings, probe_epochs=200)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop')
default_hooks = dict(checkpoint=dict(by_epoch=False, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
