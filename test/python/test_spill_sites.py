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
    total, in_loop, loops = sites(BODY)
    assert loops == [(0x30, 0x80)]  # the outer back edge, not the inner one
    assert (total, in_loop) == (2, 0)


def test_a_spill_in_the_loop_is_found():
    body = BODY[:4] + [(0x48, "@P3 LDL R9, [R1+0x4]")] + BODY[4:]
    assert sites(body)[:2] == (3, 1)


def test_a_cold_block_counts_where_it_returns():
    # The retry block after EXIT spills and returns into the loop: inside.
    body = BODY[:-1] + [(0xd8, "STL [R1+0x8], R3"), (0xe0, "BRA 0x40")]
    total, in_loop, loops = sites(body)
    assert loops == [(0x30, 0x80)]  # the cold block's branch is not a loop
    assert (total, in_loop) == (3, 1)
    # The same block returning to the tail: outside.
    body[-1] = (0xe0, "BRA 0x90")
    assert sites(body)[:2] == (3, 0)


def test_no_loop():
    total, in_loop, loops = sites([(0x00, "STL [R1], R0"), (0x10, "EXIT")])
    assert (total, in_loop, loops) == (1, 0, [])


# Three roles, each with its own step loop (warp-specialized kernels): a
# producer's gathers, two consumers' products; a prologue loop with no
# block work (Delta's) is not a step loop.
ROLES = [
    (0x00, "STL [R1], R6"),
    (0x10, "FFMA R2, R3, R4, R2"),            # prologue loop: Delta
    (0x20, "@P0 BRA 0x10"),
    (0x30, "LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64]"),
    (0x40, "@P1 BRA 0x30"),                   # producer
    (0x50, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ"),
    (0x60, "LDL R9, [R1+0x4]"),
    (0x70, "@P2 BRA 0x50"),                   # softmax role
    (0x80, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ"),
    (0x90, "LDL R10, [R1+0x8]"),
    (0xa0, "@P3 BRA 0x80"),                   # dkv role
    (0xb0, "LDL R11, [R1+0xc]"),
    (0xc0, "EXIT"),
]


def test_every_role_loop_is_a_step_loop():
    total, in_loop, loops = sites(ROLES)
    assert loops == [(0x30, 0x40), (0x50, 0x70), (0x80, 0xa0)]
    assert (total, in_loop) == (4, 2)
    body = [(0x18, "LDL R12, [R1+0x10]") if a == 0x10 else (a, t) for a, t in ROLES]
    assert sites(body)[:2] == (5, 2)   # a spill in Delta's loop is not in a step loop
