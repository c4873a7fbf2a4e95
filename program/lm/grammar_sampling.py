"""llama.cpp sampling and state reuse for the embedded engine.

Greedy decoding under a grammar without checking the whole vocabulary at every step: llama-cpp-python puts the grammar in the sampler chain, so at every step the grammar is tested
against all ~150k tokens of Qwen's vocabulary; on 2 cores that costs about a third of the decode
speed. Under greedy decoding the answer is the highest-logit token the grammar accepts, so it is
enough to test candidates in descending logit order until one is accepted (usually the first):
the same token, found with a handful of grammar checks. The whole vocabulary is tested only if
none of the top candidates is allowed. Anything else (sampling, penalties, logits processors)
goes through the library's own chain unchanged.

Each stage's prompt starts with the same instructions and demos: a small cache of saved states
lets the next call of a stage skip that shared prefix.
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np
from llama_cpp import Llama, LlamaRAMCache

TOP_CANDIDATES = 32
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class GreedyGrammarLlama(Llama):
    _grammar_sampler = None

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


class StageStateCache(LlamaRAMCache):
    """Saved model states keyed by their tokens, at most `entries` of them, least recently used out."""

    def __init__(self, entries: int):
        super().__init__(capacity_bytes=1 << 62)
        self.entries = entries

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        while len(self.cache_state) > self.entries:
            self.cache_state.popitem(last=False)
