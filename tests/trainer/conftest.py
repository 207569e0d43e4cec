"""Shared fixtures for trainer tests: a tiny local Hugging Face checkpoint (Qwen2 shape, a
byte-level BPE tokenizer trained offline, a ChatML template). Nothing is downloaded."""

import pytest
import torch

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tokenizer(directory, corpus):
    """A byte-level BPE tokenizer trained on ``corpus`` (a list of texts), wrapped as
    PreTrainedTokenizerFast with a ChatML template (Qwen's special tokens), saved to ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(list(corpus) * 4, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>"])
    hf.chat_template = CHATML
    hf.save_pretrained(directory)
    return hf


def build_tiny_model(directory, corpus):
    """Save a ~100k-parameter Qwen2 (seeded) plus its tokenizer to ``directory``."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    hf = build_tokenizer(directory, corpus)
    config = Qwen2Config(vocab_size=len(hf), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=hf.eos_token_id,
                         pad_token_id=hf.pad_token_id)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_hf_model():
    """``tiny_hf_model(directory, corpus)`` builds a tiny local checkpoint and returns its path."""
    return build_tiny_model


@pytest.fixture(scope="session")
def hf_tokenizer_builder():
    """``hf_tokenizer_builder(directory, corpus)`` trains and saves a ChatML BPE tokenizer."""
    return build_tokenizer
