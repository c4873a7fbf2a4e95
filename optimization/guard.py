"""The last check before optimize.py saves a candidate: whole diagnoses, where the program is used.

The devset scores the citation step on recorded evidence. A saved program runs every diagnosis, so
before it is saved the uncompiled program and the candidate are each asked the whole-pipeline
questions of the sets named (devset/questions.py), with the same LM, in the fixture world, each
program in an audit store of its own so that its tool calls are numbered as when it runs alone. The
candidate is refused when it gets wrong a question the uncompiled program got right, when it gives a
wrong PASS (even one the uncompiled program gives too: saving it would ship that answer), and when a
diagnosis of either program raised (then nothing was compared). For the same sets the uncompiled
program sends the same requests on every run, so the reply cache answers them after the first.

A saved program replaces the one diagnose() ran for that LM, so it must have been asked at least
the questions that one was: a run with a narrower guard (the default asks only the seed questions)
saves nothing over a program that passed the whole guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dspy

from devset import fixture_world
from devset.questions import ask, questions
from optimization.experiment import say
from program.stages.compiled import Unusable, compiled_for_lm, guarded_on
from program.stages.pipeline import Diagnosis
from program.store.audit import AuditStore

UNCOMPILED = "uncompiled"
CANDIDATE = "candidate"


@dataclass
class Guard:
    sets: list[str]
    rows: list[dict] = field(default_factory=list)

    def of(self, label: str) -> dict[str, dict]:
        return {r["id"]: r for r in self.rows if r["program"] == label}

    @property
    def lost(self) -> list[str]:
        """Questions the uncompiled program got right and the candidate did not."""
        candidate = self.of(CANDIDATE)
        return [qid for qid, row in self.of(UNCOMPILED).items() if row["right"] and not candidate[qid]["right"]]

    @property
    def gained(self) -> list[str]:
        uncompiled = self.of(UNCOMPILED)
        return [qid for qid, row in self.of(CANDIDATE).items() if row["right"] and not uncompiled[qid]["right"]]

    @property
    def wrong_passes(self) -> list[str]:
        """Questions the candidate answered with a wrong PASS (an unsafe PASS is one too)."""
        return [qid for qid, row in self.of(CANDIDATE).items() if row["wrong_pass"]]

    @property
    def failed(self) -> list[str]:
        """Questions whose diagnosis raised, under either program."""
        return list(dict.fromkeys(r["id"] for r in self.rows if r["verdict"] == "error"))

    @property
    def holds(self) -> bool:
        return bool(self.rows) and not self.lost and not self.wrong_passes and not self.failed

    def right(self, label: str) -> int:
        return sum(r["right"] for r in self.of(label).values())

    def summary(self) -> str:
        asked = len(self.of(UNCOMPILED))
        text = (f"whole diagnoses of {asked} question(s) ({', '.join(self.sets)}): uncompiled {self.right(UNCOMPILED)} "
                f"right, the candidate {self.right(CANDIDATE)}")
        if self.lost:
            text += f"; it gets wrong what the uncompiled program got right: {', '.join(self.lost)}"
        if self.wrong_passes:
            text += f"; a wrong PASS: {', '.join(self.wrong_passes)}"
        if self.failed:
            text += f"; a diagnosis raised, so nothing was compared: {', '.join(self.failed)}"
        if self.gained:
            text += f"; it gets right what the uncompiled program did not: {', '.join(self.gained)}"
        return text

    def as_dict(self) -> dict:
        return {"sets": self.sets, "holds": self.holds, "lost": self.lost, "gained": self.gained,
                "wrong_passes": self.wrong_passes, "failed": self.failed, "summary": self.summary(),
                "rows": self.rows}


def asked(sets: list[str]) -> list[dict]:
    """The questions of `sets`, each once, in the sets' order."""
    seen, out = set(), []
    for name in sets:
        for question in questions(name):
            if question["id"] not in seen:
                seen.add(question["id"])
                out.append(question)
    return out


def guard(citation: dspy.Module, sets: list[str], lm: dspy.BaseLM) -> Guard:
    """Ask every question of `sets` of the uncompiled program, then of the one with `citation` as
    its citation step."""
    result = Guard(sets=list(sets))
    chosen = asked(sets)
    with fixture_world():
        for label in (UNCOMPILED, CANDIDATE):
            store = AuditStore("sqlite://")
            for n, question in enumerate(chosen, start=1):
                program = Diagnosis(store=store) if label == UNCOMPILED else Diagnosis(store=store,
                                                                                     citation=citation.deepcopy())
                row = {**ask(question, program, lm, store), "program": label}
                result.rows.append(row)
                say(f"guard {label} [{n}/{len(chosen)}] {row['id']}: {row['verdict']} (expected {row['expected']}), "
                    f"{'right' if row['right'] else 'WRONG'}")
    return result


def narrower_than_saved(sets: list[str], lm: dspy.BaseLM) -> str | None:
    """Why a candidate guarded on `sets` must not replace the program saved for `lm`, or None when it may."""
    try:
        saved = compiled_for_lm(lm)
        asked = guarded_on(saved) if saved is not None else []
    except Unusable:  # a file that cannot say its LM is refused at load; a newer one takes its place
        return None
    if not (missing := [s for s in asked if s not in sets]):
        return None
    return (f"not saved over {saved.name}, which was asked whole diagnoses of {', '.join(asked)} before it "
            f"was saved: this run's guard did not ask {', '.join(missing)} (--guard {','.join(asked)} does)")
