"""Events -> HTML: the coloured token panels, the block-by-block view and the race's headline. Pure
functions of `Trace`s, styled by `assets/page.css`: every token kind has an Okabe-Ito colour and a
line style of its own, so kinds stay apart in greyscale too."""

from __future__ import annotations

import html
import math

from demo.engine.detokenize import END_TOKENS
from demo.engine.events import TokenEvent, Trace
from demo.page import heatmap, speedup, teach

KIND_LABELS = {
    "accepted": "accepted draft",
    "resampled": "resampled by the target",
    "bonus": "bonus token",
    "target": "target only",
}
KIND_CUES = {
    "accepted": "solid underline",
    "resampled": "dashed box",
    "bonus": "double underline",
    "target": "no mark",
}


def visible(text: str, line_breaks: bool = True) -> str:
    """Escaped HTML for a piece of text, with control characters shown as control pictures and
    each newline as ↵ (followed by a real line break unless line_breaks is False)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append('<span class="nl">↵</span>' + ("\n" if line_breaks else ""))
        elif ch == "\t":
            out.append("\t")
        elif code < 0x20:
            out.append(f'<span class="ctl">{chr(0x2400 + code)}</span>')
        elif code == 0x7F:
            out.append('<span class="ctl">␡</span>')
        else:
            out.append(html.escape(ch))
    return "".join(out)


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _quote(text: str | None) -> str:
    return repr(text or "")


def _acceptance(greedy: bool, prob: float | None) -> tuple[str, str]:
    """(what decided, its value): the argmax match in greedy mode, min(1, p/q) when sampling."""
    if greedy:
        return "argmax match", "yes" if prob == 1.0 else "no"  # greedy events carry 1.0 or 0.0
    return "min(1, p/q)", _num(prob)


def token_details(tok: TokenEvent, greedy: bool) -> list[str]:
    """The tooltip's lines, in plain text (also used as the token's accessible label)."""
    where = "prefill" if tok.round == 0 else f"round {tok.round}"
    lines = [f"#{tok.index} {_quote(tok.text)} · {KIND_LABELS[tok.kind]} · {where}"]
    if tok.kind == "accepted":
        rule, value = _acceptance(greedy, tok.accept_prob)
        lines.append(f"p = {_num(tok.p)}   q = {_num(tok.q)}   {rule}: {value}")
    elif tok.kind == "resampled":
        rule, value = _acceptance(greedy, tok.rejection.accept_prob)
        lines.append(
            f"rejected draft {_quote(tok.rejection.text)}: p = {_num(tok.rejection.p)}   q = {_num(tok.rejection.q)}"
            f"   {rule}: {value}"
        )
        lines.append(f"target's token: p = {_num(tok.p)}")
    elif tok.kind == "bonus":
        lines.append(f"every draft accepted; one more token from the target: p = {_num(tok.p)}")
    else:
        lines.append(f"p = {_num(tok.p)}")
    return lines


def _tooltip(tok: TokenEvent, greedy: bool, hint: str = "") -> str:
    where = "prefill" if tok.round == 0 else f"round {tok.round}"
    head = f"<b>#{tok.index}</b> · {html.escape(KIND_LABELS[tok.kind])} · {where}"
    rows = []
    if tok.kind == "accepted":
        rows = [("p (target)", _num(tok.p)), ("q (draft)", _num(tok.q)), _acceptance(greedy, tok.accept_prob)]
    elif tok.kind == "resampled":
        text = tok.rejection.text
        rejected = (
            f'<s class="rej">{teach.END_MARK if text in END_TOKENS else visible(text, line_breaks=False) or "∅"}</s>'
        )
        rule, value = _acceptance(greedy, tok.rejection.accept_prob)
        rows = [
            ("rejected draft", rejected),
            ("its p / q", f"{_num(tok.rejection.p)} / {_num(tok.rejection.q)}"),
            (f"its {rule}", value),
            ("p of this token", _num(tok.p)),
        ]
    elif tok.kind == "bonus":
        rows = [("p (target)", _num(tok.p)), ("why", "every draft accepted")]
    else:
        rows = [("p (target)", _num(tok.p))]
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<span class="tip" aria-hidden="true">{head}<table>{body}</table>{hint}</span>'


OPENS = "click or Enter: open its round in the block view"


def token_span(tok: TokenEvent, greedy: bool, end: bool = False, opens: bool = False) -> str:
    """One token: its text (or an end marker), its kind's class, and its tooltip; with `opens`,
    a token of a verification round says that it opens that round (the page's script does it)."""
    if end and not tok.text:
        face = teach.END_MARK
    elif not tok.text:
        face = '<span class="part">·</span>'  # held back: part of a character completed later
    elif not tok.text.strip(" "):
        face = '<span class="nl">␣</span>' * len(tok.text)  # spaces alone: shown, not an empty box
    else:
        face = visible(tok.text.lstrip(" "), line_breaks=False)
    details = token_details(tok, greedy) + ([OPENS] if opens and tok.round > 0 else [])
    label = html.escape(" — ".join(details), quote=True)
    hint = f'<span class="opens">{OPENS}</span>' if opens and tok.round > 0 else ""
    # No empty coloured fragments at line ends: a token's leading spaces (where lines wrap) go
    # before its box, and its line breaks after it.
    lead = tok.text[: len(tok.text) - len(tok.text.lstrip(" "))] if tok.text.strip(" ") else ""
    breaks = "\n" * tok.text.count("\n")
    return (
        f'{lead}<span class="tok tok-{tok.kind}" tabindex="0" data-round="{tok.round}" data-index="{tok.index}" '
        f'aria-label="{label}">{face}{_tooltip(tok, greedy, hint)}</span>{breaks}'
    )


def tokens_html(trace: Trace, opens: bool = False) -> str:
    """The answer as coloured, focusable token spans, one per TokenEvent (`opens`: see `token_span`)."""
    ended = trace.summary is not None and trace.summary.stop == "eos"
    last = len(trace.tokens) - 1
    spans = "".join(token_span(t, trace.greedy, ended and i == last, opens) for i, t in enumerate(trace.tokens))
    return f'<div class="tokens">{spans}</div>'


def _status(trace: Trace, stopped: bool = False) -> str:
    if trace.summary is not None:
        why = "end of answer" if trace.summary.stop == "eos" else "token budget reached"
        return f"done ({why})"
    if stopped:
        return "stopped" if trace.start is not None else "not run"
    if trace.prefill is None:
        return "waiting"
    return "decoding…"


def settings_line(trace: Trace) -> str:
    """What a lane runs, from its first event: "text-only drafter (lean forward) · γ = 4 · greedy" for a
    speculative run, "one target forward per token · greedy" for plain decoding."""
    start = trace.start
    if start is None:  # not started yet
        return ""
    s = start.sampling
    mode = "greedy" if s.greedy else f"sampling T={s.temperature}, top-p={s.top_p}"
    if start.drafter is None:
        return f"the target ({params(start.target_params)} parameters), one forward per token · {mode}"
    threshold = start.drafter.min_confidence
    drafts = f"γ ≤ {start.gamma}, adaptive below {threshold:g}" if threshold else f"γ = {start.gamma}"
    return f"{start.drafter.name} drafter ({_size(start.drafter.params, start.target_params)}) · {drafts} · {mode}"


def params(n: int) -> str:
    """A parameter count as the page says it: 16.3M, 656K, 7.06B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _size(drafter: int, target: int) -> str:
    """A drafter's size against its target's: "656K parameters, 1/24.8 of the 16.3M target"; a
    drafter without weights of its own (prompt lookup) says so."""
    if drafter <= 0 or target <= 0:
        return "no parameters of its own"
    return f"{params(drafter)} parameters, 1/{target / drafter:.1f} of the {params(target)} target"


def panel_html(
    trace: Trace,
    title: str,
    subtitle: str | None = None,
    stopped: bool = False,
    skip_to: str = "spd-stats",
    blocks: str | None = None,
    lane: str = "",
) -> str:
    """A lane: its title, what it runs (`settings_line`, unless given), its own compute clock, a
    link past its tokens for keyboard users (to the element `skip_to`), and its tokens. `blocks`:
    the id of the lane's block view, where a click on (or Enter at) a token opens its round;
    `lane`: the lane's class (its mark, matching its line in the charts)."""
    subtitle = settings_line(trace) if subtitle is None else subtitle
    clock = f"{trace.t:.3f} s compute · {len(trace.tokens)} tokens · {_status(trace, stopped)}"
    skip = f'<a class="skip" href="#{skip_to}">skip the {len(trace.tokens)} tokens</a>' if trace.tokens else ""
    opens = f' data-blocks="{html.escape(blocks, quote=True)}"' if blocks else ""
    return (
        f'<div class="panel {lane}"{opens}><div class="panel-head"><span class="panel-title">{html.escape(title)}</span>'
        f'<span class="panel-sub">{html.escape(subtitle)}</span>'
        f'<span class="clock">{clock}</span></div>{skip}<div class="panel-body">'
        f"{tokens_html(trace, opens=blocks is not None)}{heatmap.figure_html(trace)}</div>"
        f"{heatmap.section_html(trace)}</div>"
    )


def legend_html() -> str:
    items = "".join(
        f'<span class="legend-item"><span class="tok tok-{kind}">{html.escape(kind)}</span>'
        f"{html.escape(KIND_LABELS[kind])} <small>({KIND_CUES[kind]})</small></span>"
        for kind in ("accepted", "resampled", "bonus", "target")
    )
    chips = (
        '<span class="legend-item">block view: <span class="chip chip-ok">✓ accepted</span>'
        '<span class="chip chip-no">✗ rejected</span><span class="chip chip-skip">never checked</span></span>'
    )
    marks = (
        '<span class="legend-item"><span class="nl">␣</span> a token of spaces alone</span>'
        f'<span class="legend-item">{teach.END_MARK} the token that ends the answer</span>'
        '<span class="legend-item">∅ a draft of no text (a token that only begins a character)</span>'
    )
    return f'<div class="legend" role="list" aria-label="token colours">{items}{chips}{marks}</div>'


NOISY = 'class="noisy"'  # the mark of speedup.why_html's warning that the timing is noisy


def outcome_html(
    spds: list[Trace],
    ar: Trace,
    comparisons: list[dict] | None,
    facts: tuple[str, ...] = (),
    reference: str | None = None,
) -> str:
    """The race's headline: progress while it runs; then, for every speculative lane (`spds`, in
    lane order) against the target alone, the speedup, the lossless check and why the speedup is
    what it is (computed from that lane's step costs); and whether the target's answer matches the
    example's `reference` (when there is one).

    `comparisons` are `demo.engine.export.comparison(spd, ar)` of each lane once every run is done,
    else None; `facts` are the preset's notes about its drafters, stated under the headline.
    """
    notes = "".join(f'<div class="fact">{html.escape(fact)}</div>' for fact in facts)
    several = len(spds) > 1

    def name(spd: Trace) -> str:  # a lane's name in the outcome: its drafter's, when there are several
        return f"{spd.start.drafter.name}: " if several and spd.start and spd.start.drafter else ""

    if comparisons is None:
        if all(s.prefill is None for s in spds) and ar.prefill is None:
            text = "Pick an example or upload an image, ask a question, and press <b>Run the race</b>."
        else:
            clocks = ", ".join(f"{html.escape(name(s)) or 'speculative at '}{s.t:.3f} s" for s in spds)
            text = f"Racing… {clocks}, autoregressive at {ar.t:.3f} s of compute."
        return f'<div class="outcome">{text}</div>{notes}'
    badges, speeds, whys = [], [], []
    for spd, comparison in zip(spds, comparisons, strict=True):
        wall = comparison["speedup"]
        if not math.isnan(wall):
            speeds.append(speedup.headline_html(spd, ar, wall, name(spd)[:-2] if several else ""))
        warned = any(NOISY in why for why in whys)  # the busy machine is said once, whichever lane shows it
        whys.append(speedup.why_html(spd, ar, wall, name(spd), warn=not warned))
        if not spd.greedy:
            continue
        if comparison["identical"]:
            text = f"{name(spd)}lossless ✓ identical outputs ({len(spd.summary.token_ids)} tokens)"
            badges.append(f'<span class="badge badge-ok">{html.escape(text)}</span>')
        else:
            text = f"{name(spd)}✗ outputs differ from token {comparison['first_difference']} on"
            badges.append(f'<span class="badge badge-bad">{html.escape(text)}</span>')
    if not spds[0].greedy:
        badges.append(
            '<span class="badge badge-info" title="Speculative sampling keeps the target\'s distribution exactly; '
            'two runs draw different random numbers">sampling: outputs differ by design, same distribution</span>'
        )
    headline = (
        f'<span class="speeds">{"".join(speeds)}</span>'
        if any(speeds)
        else '<span class="headline">Too short to time: no tokens after the prefill.</span>'
    )
    notes = teach.sampling_note_html(spds[0]) + notes
    reference_badge = teach.reference_badge(ar, reference)
    how = (
        f'<details class="how-computed"><summary>How these are computed</summary>{"".join(whys)}</details>'
        if any(whys)
        else ""
    )
    return f'<div class="outcome">{"".join(badges)}{reference_badge}{headline}{how}</div>{notes}'


def loading_html(fraction: float, message: str) -> str:
    """Progress of loading a preset: a bar and what is happening."""
    percent = max(0.0, min(1.0, fraction)) * 100
    return (
        f'<div class="outcome"><progress max="100" value="{percent:.0f}"></progress>'
        f"<span>Loading the models: {html.escape(message)}</span></div>"
    )


def reference_html(task: str | None, answer: str | None) -> str:
    """An example's task family and reference answer, for judging the answers by eye (None: no
    example chosen). The Race tab shows it for its examples, the Analysis tab for a run it sends there."""
    if task is None:
        return (
            '<div class="reference">Pick one of the examples, or upload your own image. The embedded model knows '
            "only its synthetic world: coloured shapes on a plain ground, asked in its own question forms.</div>"
        )
    garbled = (
        '<p class="fact">The embedded target spells a few rarer Chinese characters in byte pieces it learnt poorly, '
        "so the end of its Chinese descriptions shows � where it picks a wrong byte.</p>"
        if task == "description" and any("\u4e00" <= c <= "\u9fff" for c in answer)
        else ""
    )
    task = html.escape(task.replace("_", " "))
    return (
        f'<div class="reference"><span class="task">{task}</span> reference answer: <q>{html.escape(answer)}</q>'
        f"{garbled}</div>"
    )


def sweep_cut_note(seconds: float) -> str:
    """Why a race that finished has no γ sweep or table of strategies: its budget ran out while they were made."""
    return (
        f"The γ sweep and the table of strategies were cut: this deployment gives this race {seconds:.0f} s, and "
        "they ran out of it after the race (its answer and numbers above are whole). Fewer tokens leave room."
    )


def over_budget_html(seconds: float) -> str:
    """What a race its budget ended says (`demo.session.budget`: a request may run for a limit of its own)."""
    return (
        f'<div class="outcome">Stopped: over budget. This deployment gives this race {seconds:.0f} s, and it '
        "used them; the panels below keep what was decoded. Ask for fewer tokens or lanes.</div>"
    )


UPLOAD_NOTE = (
    '<div class="reference upload-note" role="note">Your own image or question: the embedded model knows only its '
    "synthetic world (coloured shapes on a plain ground, the question forms of the examples, one language at a "
    "time), so on anything else it answers with confident nonsense. The race still shows how drafting works.</div>"
)


def error_html(message: str) -> str:
    return f'<div class="outcome"><div class="error-box" role="alert">{html.escape(message)}</div></div>'
