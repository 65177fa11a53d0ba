# Ablation (Table 5): supervised VGG16 perceptual network (torchvision weights), features at the
# end of each of its 5 stages (relu1_2 ... relu5_3).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(perceptual=dict(net='vgg16', checkpoint='checkpoints/vgg16-397923af.pth',
                             layers=(1, 2, 3, 4, 5)))
