"""A decided If's branch nodes (silero_vad: the If on ``sr`` replaced by its 16 kHz branch) each
have an entry of their own in report.json: placement, stage and, on CPU, the reason. Before,
the report listed only the If and its Equal, both "removed", and the summary counted none of
the nodes that run."""
from __future__ import annotations

import mrvl_convert
from support import corpus_audio


def _converted(tmp_path, deny=()):
    result = mrvl_convert.convert(corpus_audio.audio_vad(), tmp_path / "art",
                                  shapes=corpus_audio.SHAPES, values={"sr": 16000}, deny=deny)
    return result.report


def test_every_branch_node_has_its_placement_and_reason(tmp_path):
    report = _converted(tmp_path, deny=["Sigmoid"])
    entries = {e["name"]: e for e in report["nodes"]}
    listed = [d["name"] for d in entries["If_sr"]["derived"]]
    assert listed
    for name in listed:
        entry = entries[name]
        assert entry["derived_from"] == "If_sr" and entry["placement"] in ("mrvl", "cpu")
        assert entry["placement"] == "mrvl" or entry["reason"], entry
    [sigmoid] = [entries[n] for n in listed if entries[n]["op_type"] == "Sigmoid"]
    assert sigmoid["placement"] == "cpu" and "Sigmoid" in sigmoid["reason"]
    summary = report["summary"]
    placements = [e["placement"] for e in report["nodes"]]
    assert summary["nodes"] == len(placements)
    assert summary["cpu_nodes"] == placements.count("cpu") >= 1
    assert summary["mrvl_nodes"] == placements.count("mrvl")
    indices = [e["index"] for e in report["nodes"]]
    assert indices == list(range(len(indices)))


def test_the_annotated_model_skips_the_branch_entries(tmp_path):
    from mrvl_convert.viz.placement import annotate

    model = corpus_audio.audio_vad()
    report = _converted(tmp_path)
    annotated = annotate(model, report)
    [node] = [n for n in annotated.graph.node if n.name == "If_sr"]
    assert {p.key: p.value for p in node.metadata_props}["mrvl.placement"] == "removed"
