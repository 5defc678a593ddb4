"""``synthesize``: the answer, its ``[N]`` citations footer, and exactly one usage-stats block."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.citations import cited_as, finalize_answer, is_abstention, render_footer, render_stats, weighed_as
from crag_lab.nodes._deps import Deps, Node
from crag_lab.parsing import strip_stats_blocks
from crag_lab.prompts import CHITCHAT, NO_EVIDENCE_ANSWER, NORMAL, SYNTHESIZE, render_history, render_passage
from crag_lab.records import NodeName
from crag_lab.state import AgentState, UsageRecord

NODE: NodeName = "synthesize"
MODEL_FAILED_ANSWER = (
    "The model failed to produce an answer after retrying ({errors}). The evidence found is listed below."
)


def make_synthesize(deps: Deps) -> Node:
    def synthesize(state: AgentState) -> dict[str, Any]:
        log = deps.audit(NODE)
        query = state["query"]
        history = render_history(state.get("history"))
        context = list(state.get("context", []))
        complexity = (state.get("routing_plan") or {}).get("complexity")
        usage: list[UsageRecord] = []
        footer = ""
        cited: list[Any] = []
        if state.get("mode") == "normal" or complexity == "chitchat":
            kind = "normal" if state.get("mode") == "normal" else "chitchat"
            template = NORMAL if kind == "normal" else CHITCHAT
            reply, record = deps.call(NODE, "synthesize", template.format(history=history, query=query),
                                      {"query": query, "kind": kind, "evidence": []}, log,
                                      iteration=state.get("iteration", 0))
            usage.append(record)
            body = strip_stats_blocks(reply.text).strip() if reply else "Sorry, the model is unavailable right now."
        elif not context:
            body = NO_EVIDENCE_ANSWER
            log.log_audit("no_evidence", answer=NO_EVIDENCE_ANSWER)
        else:
            evidence = "\n\n".join(render_passage(item, n) for n, item in enumerate(context, 1))
            prompt = SYNTHESIZE.format(history=history, evidence=evidence, query=query)
            inputs: dict[str, Any] = {
                "query": query, "kind": "answer", "complexity": complexity, "history": state.get("history") or [],
                # the same evidence text as the prompt: no stats block a document smuggled in
                "evidence": [{"n": n, "text": strip_stats_blocks(i["text"]), "path": i.get("path"),
                              "title": i.get("title")} for n, i in enumerate(context, 1)]}
            kept = {i["id"] for i in context}
            # An item dropped in several rounds is told once.
            dropped = {i["id"]: i for i in state.get("dropped", []) if i["id"] not in kept}
            seen = [{"text": strip_stats_blocks(i["text"]), "title": i.get("title")} for i in dropped.values()]
            if seen:  # found by this run's searches, dropped by the grader: never quoted, only known to exist
                inputs["seen"] = seen
            reply, record = deps.call(NODE, "synthesize", prompt, inputs, log, iteration=state.get("iteration", 0))
            usage.append(record)
            if reply is None:
                body, cited = MODEL_FAILED_ANSWER.format(errors="see the audit log"), context
                log.log_audit("synthesize_failed", level="error", fallback="error_answer")
            elif is_abstention(reply.text):
                body = NO_EVIDENCE_ANSWER
                action = state.get("grader_action")
                # Graded evidence the synthesizer still could not answer from: the trace must say so, and
                # why when the model says (the offline synthesizer does: a missing name, a weak best unit).
                reason = ("the grader judged the evidence sufficient (GENERATE) but the model found no answer in it"
                          if action == "GENERATE" else "the model found no answer in the evidence")
                log.log_audit("model_abstained", level="warning" if action == "GENERATE" else "info",
                              items=len(context), grader_action=action,
                              reason=f"{reason}: {reply.note}" if reply.note else reason,
                              **_weighed(reply.weighed, context, []))
            else:
                body, cited = finalize_answer(reply.text, context)
                if reply.note:  # how the model read the evidence (the offline synthesizer says; an LLM does not)
                    log.log_audit("answer_read", why=cited_as(reply.note, context, cited),
                                  **_weighed(reply.weighed, context, cited))
                if not cited:
                    cited = context
                    log.log_audit("uncited_answer", level="warning", listed=len(context))
            footer = render_footer(cited)
        stats = render_stats([*state.get("usage", []), *usage])
        answer = f"{body}{footer}\n\n{stats}"
        log.log_audit("answered", cited=[item["id"] for item in cited], abstained=body == NO_EVIDENCE_ANSWER)
        return {"answer": answer, "usage": usage, "audit": log.events, "path": [NODE],
                "citations": [dict(item) for item in cited]}

    return synthesize


def _weighed(units: Sequence[Mapping[str, Any]], context: Sequence[Mapping[str, Any]],
             cited: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``units`` payload of an answer's audit event (`citations.weighed_as`), or nothing when the model gave none."""
    return {"units": weighed_as(units, context, cited)} if units else {}
