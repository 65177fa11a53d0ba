"""The PeCo tokenizer: VQ-VAE encoder/decoder, perceptual loss, discriminator, model."""
from .cnn import CNNDecoder, CNNEncoder
from .codeword_backbone import CodewordPoolBackbone
from .discriminator import PatchDiscriminator
from .perceptual import PerceptualLoss
from .tokenizer import (INPUT_MEAN, INPUT_STD, FrozenPeCoTokenizer, PeCoTokenizer,
                        TokenizerDataPreprocessor, load_tokenizer_state)

__all__ = ['CNNDecoder', 'CNNEncoder', 'CodewordPoolBackbone', 'FrozenPeCoTokenizer',
           'INPUT_MEAN', 'INPUT_STD', 'PatchDiscriminator', 'PeCoTokenizer', 'PerceptualLoss',
           'TokenizerDataPreprocessor', 'load_tokenizer_state']
