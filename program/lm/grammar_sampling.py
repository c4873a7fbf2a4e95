"""llama.cpp sampling and state reuse for the embedded engine.

Greedy decoding under a grammar without checking the whole vocabulary at every step: llama-cpp-python puts the grammar in the sampler chain, so at every step the grammar is tested
against all ~150k tokens of Qwen's vocabulary; on 2 cores that costs about a third of the decode
speed. Under greedy decoding the answer is the highest-logit token the grammar accepts, so it is
enough to test candidates in descending logit order until one is accepted (usually the first):
the same token, found with a handful of grammar checks. The whole vocabulary is tested only if
none of the top candidates is allowed. Anything else (sampling, penalties, logits processors)
goes through the library's own chain unchanged.

Each stage's prompt starts with the same instructions and demos. The model renders a prompt's
tokens as create_chat_completion will, and saves and restores the state of one sequence (the KV
cache of a prefix, no logits), so that a call can start from its stage's saved prefix
(program/lm/prefix_cache.py).
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

TOP_CANDIDATES = 32
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class GreedyGrammarLlama(Llama):
    _grammar_sampler = None
    _formatter = None

    def _init_sampler(self, *args, grammar=None, temp=0.8, repeat_penalty=1.0, frequency_penalty=0.0,
                      presence_penalty=0.0, logits_processor=None, **kwargs):
        self._free_grammar_sampler()
        neutral = repeat_penalty == 1.0 and frequency_penalty == 0.0 and presence_penalty == 0.0
        if grammar is not None and temp == 0.0 and neutral and logits_processor is None:
            self._grammar_sampler = llama_cpp.llama_sampler_init_grammar(
                self._model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
            grammar = None
        return super()._init_sampler(*args, grammar=grammar, temp=temp, repeat_penalty=repeat_penalty,
                                     frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                                     logits_processor=logits_processor, **kwargs)

    def sample(self, *args, idx=None, **kwargs):
        if self._grammar_sampler is None:
            return super().sample(*args, idx=idx, **kwargs)
        ridx = idx - self.n_tokens if idx is not None else -1
        pointer = llama_cpp.llama_get_logits_ith(self._ctx.ctx, ridx)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        token = self._first_allowed(logits)
        llama_cpp.llama_sampler_accept(self._grammar_sampler, token)
        return token

    def _allowed(self, data: np.ndarray) -> np.ndarray:
        """The logits of `data` after the grammar masked what it does not allow."""
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=len(data), selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._grammar_sampler, ctypes.byref(array))
        return data["logit"]

    def _first_allowed(self, logits: np.ndarray) -> int:
        top = np.argpartition(-logits, TOP_CANDIDATES)[:TOP_CANDIDATES]
        top = top[np.argsort(-logits[top], kind="stable")]
        one = np.zeros(1, dtype=_TOKEN_DATA)
        for token in top:
            one["id"], one["logit"] = token, logits[token]
            if math.isfinite(float(self._allowed(one)[0])):
                return int(token)
        everything = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        everything["id"] = np.arange(self._n_vocab, dtype=np.int32)
        everything["logit"] = logits
        masked = self._allowed(everything)
        return int(np.argmax(masked))

    def _free_grammar_sampler(self) -> None:
        if self._grammar_sampler is not None:
            llama_cpp.llama_sampler_free(self._grammar_sampler)
            self._grammar_sampler = None

    def close(self) -> None:
        self._free_grammar_sampler()
        super().close()

    def chat_tokens(self, messages: list[dict]) -> list[int] | None:
        """The prompt tokens create_chat_completion reads for `messages`: the GGUF's own chat template,
        rendered and tokenized as the library does for it. None under any other chat format."""
        if self.chat_handler is not None or self.chat_format != "chat_template.default":
            return None
        if self._formatter is None:
            eos, bos = self._model.token_eos(), self._model.token_bos()
            self._formatter = Jinja2ChatFormatter(
                template=self.metadata["tokenizer.chat_template"],
                eos_token=self._model.token_get_text(eos) if eos != -1 else "",
                bos_token=self._model.token_get_text(bos) if bos != -1 else "", stop_token_ids=[eos])
        rendered = self._formatter(messages=messages)
        return self.tokenize(rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True)

    def evaluated(self) -> list[int]:
        """The tokens whose state the context holds now."""
        return self.input_ids[: self.n_tokens].tolist()

    def keep(self, n_tokens: int) -> None:
        """Keep the state of the first `n_tokens` evaluated tokens and drop the rest."""
        self._ctx.kv_cache_seq_rm(-1, n_tokens, -1)
        self.n_tokens = n_tokens
        self._requires_eval = True

    def evaluate_from_start(self, tokens: list[int]) -> None:
        """The state of exactly `tokens`, read from the first token on."""
        self.reset()
        self.eval(tokens)

    def sequence_state(self) -> bytes:
        """The state of the evaluated tokens as llama.cpp serialises one sequence: its KV cache only."""
        ctx = self._ctx.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
        if not 0 < written <= size:
            raise RuntimeError(f"llama.cpp wrote {written} of {size} bytes of sequence state")
        return bytes(memoryview(buffer)[:written])

    def restore_sequence(self, tokens: list[int], state: bytes) -> bool:
        """Set the context to `state`, saved by `sequence_state` after exactly `tokens`. False, with an
        empty context, when llama.cpp does not accept it."""
        self._ctx.kv_cache_clear()
        self.reset()
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(self._ctx.ctx, buffer, len(state), 0) != len(state):
            self._ctx.kv_cache_clear()
            return False
        self.input_ids[: len(tokens)] = tokens
        self.n_tokens = len(tokens)
        return True
