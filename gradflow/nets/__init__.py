"""Networks half of gradflow: ViT and GPT-2 in equinox, training with checkpoints and resume on one or several
devices and processes, perturbation spectra of the attention heads, the paper's figures, the toy attention head
with full weights, the data loaders and InRank (paper 004)."""

from ._configs import (
    GPT_CONFIGS as GPT_CONFIGS,
)
from ._configs import (
    TRAIN_CONFIGS as TRAIN_CONFIGS,
)
from ._configs import (
    VIT_CONFIGS as VIT_CONFIGS,
)
from ._configs import (
    GPTConfig as GPTConfig,
)
from ._configs import (
    TrainConfig as TrainConfig,
)
from ._configs import (
    ViTConfig as ViTConfig,
)
from ._configs import (
    gpt_config as gpt_config,
)
from ._configs import (
    train_config as train_config,
)
from ._configs import (
    vit_config as vit_config,
)
from ._data import (
    ImageDataset as ImageDataset,
)
from ._data import (
    TextDataset as TextDataset,
)
from ._data import (
    batch_indices as batch_indices,
)
from ._data import (
    image_batches as image_batches,
)
from ._data import (
    load_images as load_images,
)
from ._data import (
    load_text as load_text,
)
from ._data import (
    text_batches as text_batches,
)
from ._gpt import GPT as GPT
from ._inrank import (
    InRankConfig as InRankConfig,
)
from ._inrank import (
    InRankLinear as InRankLinear,
)
from ._inrank import (
    LowRankLinear as LowRankLinear,
)
from ._inrank import (
    explained_ratio as explained_ratio,
)
from ._inrank import (
    grow_rank as grow_rank,
)
from ._inrank import (
    mlp_ranks as mlp_ranks,
)
from ._inrank import (
    parameter_count as parameter_count,
)
from ._inrank import (
    to_inrank as to_inrank,
)
from ._inrank import (
    to_low_rank as to_low_rank,
)
from ._inrank import (
    update_ranks as update_ranks,
)
from ._inrank_train import (
    InRankResult as InRankResult,
)
from ._inrank_train import (
    compare_inrank as compare_inrank,
)
from ._inrank_train import (
    train_inrank as train_inrank,
)
from ._layers import (
    MLP as MLP,
)
from ._layers import (
    Block as Block,
)
from ._layers import (
    LayerNorm as LayerNorm,
)
from ._layers import (
    Linear as Linear,
)
from ._layers import (
    MultiHeadAttention as MultiHeadAttention,
)
from ._layers import (
    attention_weights as attention_weights,
)
from ._optim import (
    learning_rate_schedule as learning_rate_schedule,
)
from ._plots import (
    plot_inrank_ranks as plot_inrank_ranks,
)
from ._plots import (
    plot_losses as plot_losses,
)
from ._plots import (
    plot_normalised_spectra as plot_normalised_spectra,
)
from ._plots import (
    plot_singular_value_evolution as plot_singular_value_evolution,
)
from ._plots import (
    plot_stable_rank_by_layer as plot_stable_rank_by_layer,
)
from ._plots import (
    plot_stable_rank_through_training as plot_stable_rank_through_training,
)
from ._runs import RunExistsError as RunExistsError
from ._runs import SpectraHistory as SpectraHistory
from ._runs import load_spectra as load_spectra
from ._runs import read_metrics as read_metrics
from ._spectra import (
    HeadSpectra as HeadSpectra,
)
from ._spectra import (
    normalised as normalised,
)
from ._spectra import (
    perturbation_spectra as perturbation_spectra,
)
from ._spectra import (
    product_singular_values as product_singular_values,
)
from ._spectra import (
    stable_rank as stable_rank,
)
from ._spectra import (
    weight_spectra as weight_spectra,
)
from ._step import (
    NonFiniteLossError as NonFiniteLossError,
)
from ._stop import RunInterrupted as RunInterrupted
from ._tokenizer import ByteTokenizer as ByteTokenizer
from ._toy_attention import (
    AttentionHead as AttentionHead,
)
from ._toy_attention import (
    ToyAttentionConfig as ToyAttentionConfig,
)
from ._toy_attention import (
    ToyAttentionResult as ToyAttentionResult,
)
from ._toy_attention import (
    plot_toy_attention as plot_toy_attention,
)
from ._toy_attention import (
    toy_attention_data as toy_attention_data,
)
from ._toy_attention import (
    train_toy_attention as train_toy_attention,
)
from ._train import (
    TrainResult as TrainResult,
)
from ._train import (
    default_compute_dtype as default_compute_dtype,
)
from ._train import (
    train as train,
)
from ._vit import ViT as ViT

__all__ = [
    "GPT_CONFIGS",
    "TRAIN_CONFIGS",
    "VIT_CONFIGS",
    "GPTConfig",
    "TrainConfig",
    "ViTConfig",
    "gpt_config",
    "train_config",
    "vit_config",
    "ImageDataset",
    "TextDataset",
    "batch_indices",
    "image_batches",
    "load_images",
    "load_text",
    "text_batches",
    "ByteTokenizer",
    "InRankConfig",
    "InRankLinear",
    "InRankResult",
    "LowRankLinear",
    "compare_inrank",
    "explained_ratio",
    "grow_rank",
    "mlp_ranks",
    "parameter_count",
    "to_inrank",
    "to_low_rank",
    "train_inrank",
    "update_ranks",
    "GPT",
    "ViT",
    "MLP",
    "Block",
    "LayerNorm",
    "Linear",
    "MultiHeadAttention",
    "attention_weights",
    "plot_inrank_ranks",
    "plot_losses",
    "plot_normalised_spectra",
    "plot_singular_value_evolution",
    "plot_stable_rank_by_layer",
    "plot_stable_rank_through_training",
    "SpectraHistory",
    "load_spectra",
    "read_metrics",
    "HeadSpectra",
    "normalised",
    "perturbation_spectra",
    "product_singular_values",
    "stable_rank",
    "weight_spectra",
    "AttentionHead",
    "ToyAttentionConfig",
    "ToyAttentionResult",
    "plot_toy_attention",
    "toy_attention_data",
    "train_toy_attention",
    "NonFiniteLossError",
    "RunExistsError",
    "RunInterrupted",
    "TrainResult",
    "default_compute_dtype",
    "learning_rate_schedule",
    "train",
]
