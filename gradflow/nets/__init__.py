"""Networks half of gradflow: ViT and GPT-2 in equinox, training with checkpoints and resume,
perturbation spectra of the attention heads, the paper's figures, the toy attention head with full
weights, the data loaders and InRank (paper 004)."""

from ._configs import (
    GPT_CONFIGS as GPT_CONFIGS,
    TRAIN_CONFIGS as TRAIN_CONFIGS,
    VIT_CONFIGS as VIT_CONFIGS,
    GPTConfig as GPTConfig,
    TrainConfig as TrainConfig,
    ViTConfig as ViTConfig,
    gpt_config as gpt_config,
    train_config as train_config,
    vit_config as vit_config,
)
from ._data import (
    ImageDataset as ImageDataset,
    TextDataset as TextDataset,
    batch_indices as batch_indices,
    image_batches as image_batches,
    text_batches as text_batches,
    load_images as load_images,
    load_text as load_text,
)
from ._gpt import GPT as GPT
from ._inrank import (
    InRankConfig as InRankConfig,
    InRankLinear as InRankLinear,
    InRankResult as InRankResult,
    LowRankLinear as LowRankLinear,
    compare_inrank as compare_inrank,
    explained_ratio as explained_ratio,
    grow_rank as grow_rank,
    mlp_ranks as mlp_ranks,
    parameter_count as parameter_count,
    to_inrank as to_inrank,
    to_low_rank as to_low_rank,
    train_inrank as train_inrank,
    update_ranks as update_ranks,
)
from ._layers import (
    MLP as MLP,
    Block as Block,
    LayerNorm as LayerNorm,
    Linear as Linear,
    MultiHeadAttention as MultiHeadAttention,
    attention_weights as attention_weights,
)
from ._plots import (
    plot_inrank_ranks as plot_inrank_ranks,
    plot_losses as plot_losses,
    plot_normalised_spectra as plot_normalised_spectra,
    plot_singular_value_evolution as plot_singular_value_evolution,
    plot_stable_rank_by_layer as plot_stable_rank_by_layer,
    plot_stable_rank_through_training as plot_stable_rank_through_training,
)
from ._runs import SpectraHistory as SpectraHistory, load_spectra as load_spectra, read_metrics as read_metrics
from ._spectra import (
    HeadSpectra as HeadSpectra,
    normalised as normalised,
    perturbation_spectra as perturbation_spectra,
    product_singular_values as product_singular_values,
    stable_rank as stable_rank,
    weight_spectra as weight_spectra,
)
from ._toy_attention import (
    AttentionHead as AttentionHead,
    ToyAttentionConfig as ToyAttentionConfig,
    ToyAttentionResult as ToyAttentionResult,
    plot_toy_attention as plot_toy_attention,
    toy_attention_data as toy_attention_data,
    train_toy_attention as train_toy_attention,
)
from ._tokenizer import ByteTokenizer as ByteTokenizer
from ._train import (
    NonFiniteLossError as NonFiniteLossError,
    TrainResult as TrainResult,
    default_compute_dtype as default_compute_dtype,
    learning_rate_schedule as learning_rate_schedule,
    train as train,
)
from ._vit import ViT as ViT

__all__ = [
    "GPT_CONFIGS", "TRAIN_CONFIGS", "VIT_CONFIGS", "GPTConfig", "TrainConfig", "ViTConfig",
    "gpt_config", "train_config", "vit_config",
    "ImageDataset", "TextDataset", "batch_indices", "image_batches", "load_images", "load_text", "text_batches",
    "ByteTokenizer",
    "InRankConfig", "InRankLinear", "InRankResult", "LowRankLinear", "compare_inrank", "explained_ratio",
    "grow_rank", "mlp_ranks", "parameter_count", "to_inrank", "to_low_rank", "train_inrank", "update_ranks",
    "GPT", "ViT", "MLP", "Block", "LayerNorm", "Linear", "MultiHeadAttention", "attention_weights",
    "plot_inrank_ranks", "plot_losses", "plot_normalised_spectra", "plot_singular_value_evolution",
    "plot_stable_rank_by_layer", "plot_stable_rank_through_training",
    "SpectraHistory", "load_spectra", "read_metrics",
    "HeadSpectra", "normalised", "perturbation_spectra", "product_singular_values", "stable_rank",
    "weight_spectra",
    "AttentionHead", "ToyAttentionConfig", "ToyAttentionResult", "plot_toy_attention", "toy_attention_data",
    "train_toy_attention",
    "NonFiniteLossError", "TrainResult", "default_compute_dtype", "learning_rate_schedule", "train",
]
