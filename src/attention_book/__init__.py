"""attention_book: the code behind *Attention & Transformers — an interactive book*.

The package has four layers, each a folder (a test checks the direction of imports):

* ``core``: settings, argument checks, the figures' style, the training loop, memory;
* ``data``: the data registry, translation pairs, the tokenizer and corpus, images;
* ``models``: the building blocks the chapters teach (attention, positions, Transformer
  blocks, seq2seq, the vision Transformer, language models, decoding, tiled attention);
* ``experiments``: one module per chapter experiment, imported by its chapter
  (``from attention_book.experiments import offset_task``);
* ``book``: the book's own machinery (explorers, claims, shown source, diagrams, live views).

The top level offers the concepts the chapters use, d2l-style::

    import attention_book as ab
    ab.MultiHeadAttention(num_hiddens=64, num_heads=4)

Everything else (validators, helpers, the experiments) is imported from its module.
Each name is defined once, in the module named after its concept.
"""

# ruff: noqa: F401  (this file only re-exports)

from . import assignments, book, core, data, experiments, models

# core: settings, figures' style, the training loop, the memory yardstick, printed tables
from .core.config import (
    experiment_size,
    is_full_size,
    sized,
    device,
    book_seed,
    book_seeds,
    resolve_seed,
    seed_everything,
    describe_run,
    single_thread,
    small_model_threads,
    training_precision,
    distributed_run,
    is_main_process,
)
from .core.plot import use_book_style, heatmaps_figure, curves_figure, chance_line
from .core.train import (
    accuracy,
    fit,
    PRECISIONS,
    grad_clipping,
    evaluating,
    IGNORE,
    warmup_cosine_schedule,
    schedule_figure,
)
from .core.memory import PeakMemory, peak_memory
from .core.table import print_table

# data: downloads, the translation pairs, the tokenizer and corpus
from .data.images import load_image_data
from .data.text import load_translation, bleu, bleu_parts
from .data.corpus import synthetic_corpus, load_corpus

# models: the building blocks the chapters teach
from .models.attention import (
    masked_softmax,
    key_mask,
    causal_mask,
    attend,
    keep_attention_weights,
    record_attention,
    collect_attention,
    DotProductAttention,
    AdditiveAttention,
    MultiHeadAttention,
    transpose_qkv,
    transpose_output,
)
from .models.scoring import (
    DistanceAttention,
    BilinearAttention,
    distance_scores,
    scaling_statistics,
    score_scale_figure,
    SCORING_KINDS,
    scoring_cost,
    measure_scoring_costs,
    scoring_flops,
    scoring_costs_figure,
    token_weights_figure,
)
from .models.kernels import (
    KERNEL_NAMES,
    gaussian_kernel,
    boxcar_kernel,
    constant_kernel,
    epanechnikov_kernel,
    nadaraya_watson,
    width_objective,
    make_kernel_data,
    learn_width,
    kernels_figure,
    estimates_figure,
    estimate_weights,
    kernel_explorer_figure,
    width_objectives_figure,
)
from .models.positional import (
    encoding_columns_figure,
    encoding_heatmap_figure,
    positional_encoding_figure,
    sinusoidal_table,
    offset_rotation,
    PositionalEncoding,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_slopes,
    alibi_bias,
)
from .models.attention_variants import (
    GroupedQueryAttention,
    RotaryAttention,
    ALiBiAttention,
)
from .models.seq2seq import (
    Encoder,
    Decoder,
    AttentionDecoder,
    EncoderDecoder,
    Seq2SeqEncoder,
    Seq2SeqDecoder,
    Seq2SeqAttentionDecoder,
    make_seq2seq,
    masked_cross_entropy,
    translation_loss,
    greedy_search,
    beam_search,
    translate,
)
from .models.transformer import (
    PositionWiseFFN,
    AddNorm,
    TransformerEncoderBlock,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerDecoder,
    make_transformer,
    greedy_without_cache,
    copy_to_torch_layer,
)
from .models.vit import (
    patchify,
    PatchEmbedding,
    ViTMLP,
    ViTBlock,
    ViT,
    SmallCNN,
    image_classification_loss,
    count_parameters,
    sample_photo,
    patch_grid_figure,
    cls_attention_figure,
)
from .models.language_models import (
    EncoderOnlyLM,
    DecoderOnlyLM,
    EncoderDecoderLM,
    pretraining_masks_figure,
)
from .models.objectives import (
    mask_for_mlm,
    corrupt_spans,
    restore_spans,
    mlm_batch,
    span_batch,
    clm_batch,
    Batches,
    mlm_loss,
    seq2seq_loss,
    clm_loss,
    classification_loss,
    evaluate_loss,
    unigram_cross_entropy,
    unigram_baseline,
    masked_accuracy,
    next_token_accuracy,
    fill_masks,
    span_loss_parts,
)
from .models.decoding import generate, greedy_decode, sampling_figure
from .models.kv_cache import (
    kv_cache_bytes,
    cache_bytes,
    greedy_generate,
    seconds_per_token,
)
from .models.tiled import (
    online_softmax,
    softmax_block,
    merge_softmax,
    finish_softmax,
    tiled_attention,
    tile_counts,
    tile_figure,
)

# book: explorers, claims, shown source, diagrams, live views
from .book.explorer import Choice, Slider, LogSlider, Steps, Text, explore
from .book.claims import claim, assert_trained, glue, glue_counts
from .book.source import show_source
from .book.diagrams import (
    attention_pooling_diagram,
    bahdanau_diagram,
    multihead_attention_diagram,
    layer_comparison_diagram,
    transformer_diagram,
    vit_diagram,
    pretraining_modes_diagram,
)
from .book.live import LiveView, live
from .book.live_ch01 import ch01_live_view
from .book.live_ch02 import ch02_live_view
from .book.live_ch04 import ch04_live_view
from .book.live_ch07 import ch07_live_view
from .book.live_ch08 import ch08_live_view
from .book.live_ch09 import ch09_live_view

__version__ = "0.1.0"
