"""benchmarks/sass_walk.py: paths through a small hand-written nvdisasm listing."""

from __future__ import annotations

import pytest

from benchmarks import sass_walk
from benchmarks.sass_walk import read_listing, walk

LISTING = """
//--------------------- .text.other --------------------------
.text.other:
        /*0000*/                   EXIT ;
//--------------------- .text.k --------------------------
.text.k:
	//## File "k.cu", line 3
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
	//## File "k.cu", line 5
        /*0010*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
        /*0020*/               @P0 BRA `(.L_x_2) ;
        /*0030*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0040*/              @!P0 IADD3 R1, R1, 0x2, RZ ;
.L_x_2:
	//## File "k.cu", line 7
        /*0050*/                   BRA.DIV UR4, `(.L_x_9) ;
        /*0060*/              @!P1 BRA P2, `(.L_x_3) ;
        /*0070*/                   NOP ;
        /*0080*/                   BRA `(.L_x_4) ;
.L_x_3:
        /*0090*/                   NOP ;
.L_x_4:
	//## File "k.cu", line 9
        /*00a0*/               @P3 BRA `(.L_x_1) ;
        /*00b0*/                   EXIT ;
.L_x_9:
        /*00c0*/                   BRA `(.L_x_9) ;
//--------------------- .text.after --------------------------
.text.after:
        /*0000*/                   EXIT ;
"""


@pytest.fixture
def listing() -> sass_walk.Listing:
    return read_listing(LISTING, "k")


def test_the_listing_of_one_function_is_read(listing) -> None:
    assert [i.address for i in listing.instructions][:3] == [0x0, 0x10, 0x20]
    assert len(listing.instructions) == 13  # not the other functions' EXITs
    assert listing.labels == {".L_x_1": 1, ".L_x_2": 5, ".L_x_3": 9, ".L_x_4": 10, ".L_x_9": 12}
    assert listing.instructions[5].line == 7 and listing.instructions[10].line == 9


def test_a_trip_round_the_loop_counts_each_instruction_met(listing) -> None:
    # P0 taken (skip the two adds), the P2 branch taken, back round the loop: 6 instructions.
    got = walk(listing, ".L_x_1", "ttt")
    assert (got.count, got.end, got.unused) == (6, "loop", "")
    # Not taken both times: the adds, the NOP and the BRA to .L_x_4 as well, then EXIT.
    got = walk(listing, ".L_x_1", "nnn")
    assert (got.count, got.end, got.at.text) == (10, "exit", "EXIT")
    # Predicated instructions count; BRA.DIV is not taken; a stop ends the walk there.
    assert walk(listing, ".L_x_1", "nt", stop=".L_x_4").count == 7


def test_the_walk_stops_where_a_decision_is_needed(listing, capsys, tmp_path) -> None:
    got = walk(listing, "0x10", "t")
    assert (got.count, got.end, got.at.address) == (4, "decide", 0x60)
    path = tmp_path / "k.sass"
    path.write_text(LISTING)
    source = tmp_path / "k.cu"
    source.write_text("\n".join(f"line {i}" for i in range(1, 10)))
    sass_walk.main([str(path), "k", ".L_x_1", "t", "--source", str(source)])
    out = capsys.readouterr().out
    assert out.startswith("4 instructions, decide at 0x60: @!P1 BRA P2, `(.L_x_3)")
    assert "line 7: line 7" in out


def test_bad_requests_are_refused(listing) -> None:
    with pytest.raises(SystemExit, match="no function nothere"):
        read_listing(LISTING, "nothere")
    with pytest.raises(SystemExit, match="no label .L_x_7"):
        walk(listing, ".L_x_7", "")
    with pytest.raises(SystemExit, match="decisions are t or n"):
        walk(listing, ".L_x_1", "tx")
