"""Which words of a claim are names, and which of them its evidence lacks: identifiers, the
catalog's names, and the words a writer marks as names. A name is matched as written, after NFKC
and case folding; what a name means is left to the other checks."""

from __future__ import annotations

import re

from program.evidence.question_words import mentions
from program.evidence.statements import CLEARED_STATES, RAISED_STATES, only_denied
from program.evidence.units import UNIT
from tools.text.folding import nfkc

# Names and identifiers whose every letter matters: anything with a digit, a joiner or an inner capital.
IDENTIFIER = re.compile(r"[A-Za-z0-9_%]+(?:[.\-/:=][A-Za-z0-9_%]+)+|[A-Za-z_]*[0-9][A-Za-z0-9_%]*|"
                        r"[A-Za-z]*[a-z][A-Z][A-Za-z0-9]*|[A-Z]{2,}[A-Za-z0-9]*")
# A name as a writer marks one without a digit, joiner or inner capital: a capitalised word that
# does not open a sentence, a quote or a list item ("the Redis connection pool", "的 Redis 连接池").
CAPITALISED = re.compile(r"(?<![A-Za-z0-9_\-])[A-Z][a-z]+(?![A-Za-z0-9_\-])")
OPENINGS = frozenset(".!?:;。！？：；\"'“‘(（[「–—-")
# Numbers with units and separators ("3600/3900/4200ms", "3.8GB/4GB", "91%"): ungrounded_numbers checks those.
MEASURE = re.compile(rf"(?:[\d.,%/:=\-]+(?:{UNIT})?)+")


def marked_names(text: str) -> list[str]:
    """The capitalised words of `text` that do not open a sentence (`CAPITALISED`)."""
    names = []
    for found in CAPITALISED.finditer(text):
        before = text[:found.start()].rstrip()
        if before and before[-1] not in OPENINGS:
            names.append(found.group())
    return names


def ungrounded_names(claim_text: str, ref_texts: list[str], names: tuple[str, ...], states_judged: bool = False
                     ) -> list[str]:
    """Identifiers, catalog names (services, alerts, states) and names the claim marks as such
    (`marked_names`) that none of the refs it cites (`ref_texts`) contains. A state the claim only
    denies ("未 firing" of a resolved alert) is not stated: what a claim says of a state is checked
    against the cited alert's state (`state_conflicts`). `states_judged`: the state check already refused the states
    this claim states, so that a claim that writes the state's name ("still firing") is refused for
    what one that writes it in other words ("仍在触发") is refused for, and no more."""
    judged = (*RAISED_STATES, *CLEARED_STATES) if states_judged else ()
    text = nfkc(" ".join(ref_texts)).casefold()
    claim_text = nfkc(claim_text)
    stated = [t for t in IDENTIFIER.findall(claim_text) if not MEASURE.fullmatch(t)]
    stated += [n for n in names if mentions(claim_text, [n.casefold()]) and not only_denied(n, claim_text)
               and n.casefold() not in judged]
    catalog = {n.casefold() for n in names}
    stated += [w for w in marked_names(claim_text) if w.casefold() not in catalog]
    return [t for t in dict.fromkeys(stated) if t.casefold() not in text]
