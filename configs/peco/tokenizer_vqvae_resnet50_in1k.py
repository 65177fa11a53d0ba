# Ablation (Table 5): ResNet-50 perceptual network, features at the end of each of its 4 stages
# (torchvision or MoCo v1/v2/v3 checkpoints).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual=dict(net='resnet50', checkpoint='checkpoints/mocov3_resnet50.pth',
                             layers=(1, 2, 3, 4)))
