"""scripts/spill_sites.py on hand-written SASS listings (no cuobjdump
needed): which spill instructions it places in the step loop."""

import importlib.util
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location(
    "spill_sites", os.path.join(ROOT, "scripts", "spill_sites.py"))
spill_sites = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(spill_sites)


def listing(name, body):
    """A cuobjdump -sass listing of one function; body: (address, text)."""
    lines = ["\tcode for sm_90a", f"\t\tFunction : {name}"]
    lines += [f"        /*{a:04x}*/                   {t} ;   /* 0x0000 */"
              for a, t in body]
    return "\n".join(lines)


# prologue 0x00-0x20, the step loop 0x30-0x80 (back edge at 0x80), a
# short inner loop at 0x50-0x60, the tail, EXIT at 0xb0, then a cold
# block (a wait's retry) that returns into the loop at 0x40.
BODY = [
    (0x00, "STL [R1], R6"),
    (0x10, "MOV R2, R3"),
    (0x30, "LDS R4, [R5]"),
    (0x40, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR36], RZ"),
    (0x50, "IADD3 R7, R7, 0x1, RZ"),
    (0x60, "@!P0 BRA 0x50"),
    (0x70, "@P1 BRA 0xc0"),
    (0x80, "@P2 BRA 0x30"),
    (0x90, "LDL.LU R8, [R1]"),
    (0xb0, "EXIT"),
    (0xc0, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6+0x4000], R0"),
    (0xd0, "@!P0 BRA 0xc0"),
    (0xe0, "BRA 0x40"),
]


def sites(body):
    (instrs,) = spill_sites.functions(listing("k_bwd", body)).values()
    return spill_sites.spill_sites(instrs)


def test_spills_before_and_after_the_loop_are_outside():
    total, in_loop, loop = sites(BODY)
    assert loop == (0x30, 0x80)  # the longest back edge, not the inner one
    assert (total, in_loop) == (2, 0)


def test_a_spill_in_the_loop_is_found():
    body = BODY[:4] + [(0x48, "@P3 LDL R9, [R1+0x4]")] + BODY[4:]
    assert sites(body)[:2] == (3, 1)


def test_a_cold_block_counts_where_it_returns():
    # The retry block after EXIT spills and returns into the loop: inside.
    body = BODY[:-1] + [(0xd8, "STL [R1+0x8], R3"), (0xe0, "BRA 0x40")]
    total, in_loop, loop = sites(body)
    assert loop == (0x30, 0x80)  # the cold block's branch is not the loop
    assert (total, in_loop) == (3, 1)
    # The same block returning to the tail: outside.
    body[-1] = (0xe0, "BRA 0x90")
    assert sites(body)[:2] == (3, 0)


def test_no_loop():
    total, in_loop, loop = sites([(0x00, "STL [R1], R0"), (0x10, "EXIT")])
    assert (total, in_loop, loop) == (1, 0, None)
