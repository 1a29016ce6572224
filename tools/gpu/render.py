"""Plain-text tables of gpu_bench's results (also used by device_suite's log)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tools.common.report import format_table
from tools.gpu.augment_cost import TARGET_AUGMENT_FRACTION


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def render_h2d(rows: Sequence[dict[str, Any]], title: str) -> str:
    return format_table(["dtype", "host", "MB", "ms/batch", "GB/s", "% of link peak"],
                        [[r["dtype"], r["host"], r["mb"], r["ms"], r["gb_s"], _pct(r.get("of_link_peak"))]
                         for r in rows], title=title)


def render_augment(aug: dict[str, Any], title: str) -> str:
    table = format_table(
        ["pipeline", "out dtype", "ms/batch", "% of step", f"< {TARGET_AUGMENT_FRACTION:.0%}"],
        [[a.get("pipeline", "Augment"), a["out_dtype"], a["ms"], 100 * a["fraction_of_step"], a["meets_target"]]
         for a in aug["augment"]],
        title=f"{title}, batch {aug['batch']} at {aug['side']}px; ResNet-50 step {aug['step_ms']:.1f} ms")
    if not aug.get("kernels"):
        return table
    rows = [[k["kernel"], k["calls"], k["ms"]] for k in aug["kernels"]]
    kernels = format_table(["kernel", "calls", "ms/batch"], rows,
                           title="Augment bfloat16: CUDA kernels by device time (torch.profiler)")
    return f"{table}\n{kernels}"


def _target(met: bool | None) -> str:
    return "" if met is None else ("target met" if met else "target missed")


def render_end_to_end(e2e: dict[str, Any], title: str) -> str:
    if "skipped" in e2e:
        return f"{title}: skipped ({e2e['skipped']})"
    rows = [[r["feed"], r["num_workers"], r.get("decode", ""), r.get("steps"), r.get("img_s"),
             _pct(r.get("wait_fraction")), _pct(r.get("gpu_idle_fraction")), r.get("ratio_to_ceiling"),
             r.get("error") or r.get("skipped") or _target(r.get("meets_target"))] for r in e2e["fed"]]
    idle = e2e.get("ceiling_gpu_idle_fraction")
    idle_text = "" if idle is None else f", GPU idle {100 * idle:.1f}%"
    return format_table(["feed", "workers", "decode", "timed steps", "img/s", "waiting %", "GPU idle %", "of ceiling",
                         "note"],
                        rows, title=f"{title}; ceiling (data already on the device) {e2e['ceiling_img_s']:.0f} img/s"
                                    f"{idle_text}")


def render_decode(decode: dict[str, Any], title: str) -> str:
    if "skipped" in decode:
        return f"{title}: skipped ({decode['skipped']})"
    rows = [[f"CPU Pillow full decode, {decode['threads']} threads", decode["cpu_full_img_s"], None, None, None],
            [f"CPU loader crop decode (the CPU path), {decode['threads']} threads", decode["cpu_loader_crop_img_s"],
             1.0, None, None]]
    for row in decode.get("device_variants", ()):
        how = "region" if row["regions"] else "whole image"
        name = f"decode='device', {row.get('decoder') or row['backend']}, {how} + crop + resize"
        rows.append([name, row.get("img_s"), row.get("vs_cpu_crop"), row.get("decode_only_img_s"),
                     row.get("skipped") or f"{row['mad_mean']:.2f} (worst {row['mad_worst']:.2f})"])
    rows += [["torchvision decode_jpeg, batched (GPU)", decode.get("gpu_full_img_s"), None, None, None],
             ["torchvision decode_jpeg + resize (GPU)", decode.get("gpu_resize_img_s"), None, None, None]]
    notes = [f"torchvision: {decode['gpu_skipped']}"] if "gpu_skipped" in decode else []
    if "device_skipped" in decode:
        notes.append(f"decode='device': {decode['device_skipped']}")
    if "device_vs_cpu_crop" in decode:
        notes.append(f"decode='device' as it runs ({decode['device_decoder']}, region) "
                     f"{decode['device_vs_cpu_crop']:.2f}x the CPU crop path (target >= 5x on a GPU)")
    note = f" ({'; '.join(notes)})" if notes else ""
    return format_table(["decoder", "img/s", "x CPU path", "decoder call alone, img/s", "levels from the CPU path"],
                        rows,
                        title=f"{title}: {decode['images']} JPEGs, mean {decode['mean_kib']:.0f} KiB{note}")


def render(results: dict[str, Any]) -> str:
    """The results of the parts that ran as plain-text tables."""
    parts = []
    if "h2d" in results:
        parts.append(render_h2d(results["h2d"], f"1. host-to-device copy ({results['device']})"))
    if "augment" in results:
        parts.append(render_augment(results["augment"], "2. augment"))
    if "end_to_end" in results:
        parts.append(render_end_to_end(results["end_to_end"], "3. end to end"))
    if "gpu_decode" in results:
        parts.append(render_decode(results["gpu_decode"], "4. JPEG decode"))
    return "\n\n".join(parts)
