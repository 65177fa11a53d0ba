# Ablation (Table 7): + adversarial loss from a patch discriminator, weight 0.4. The paper gives
# no start iteration; we start it after the 5000 warm-up iterations (as Taming delays its GAN).
_base_ = './tokenizer_vqvae_in1k.py'
model = dict(adversarial_weight=0.4, adversarial_start_iter=5000,
             discriminator=dict(type='PatchDiscriminator', base_channels=64, num_layers=3))
