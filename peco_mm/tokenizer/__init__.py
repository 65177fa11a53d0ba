"""The PeCo tokenizer: VQ-VAE encoder/decoder, perceptual loss, discriminator, model."""
from .cnn import CNNDecoder, CNNEncoder
from .codeword_backbone import CodewordPoolBackbone
from .dalle import DalleDecoder, DalleTokenizer
from .discriminator import PatchDiscriminator
from .perceptual import PerceptualLoss
from .tokenizer import (TOKENIZER_MEAN, TOKENIZER_STD, FrozenPeCoTokenizer, PeCoTokenizer,
                        TokenizerDataPreprocessor, load_tokenizer_state)

__all__ = ['CNNDecoder', 'CNNEncoder', 'CodewordPoolBackbone', 'DalleDecoder',
           'DalleTokenizer', 'FrozenPeCoTokenizer',
           'PatchDiscriminator', 'PeCoTokenizer', 'PerceptualLoss',
           'TOKENIZER_MEAN', 'TOKENIZER_STD',
           'TokenizerDataPreprocessor', 'load_tokenizer_state']
