package steer

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Program is the classic BPF program that steers each datagram to
// t[Bucket(value)] when Locate finds a value, and to the door (0) otherwise.
// Its length never depends on t, so any table fits.
func Program(t *Table) []unix.SockFilter { return program(t, Window) }

// The program's scratch memory.
const (
	memH    = 0 // the hash so far
	memH31  = 1 // the hash so far times 31: ALU takes K or X, never M
	memBase = 2 // the value's offset, which X must hold for each load
)

// positionsPerHop is how many scan positions share one jump to the verify
// code. A conditional jump reaches at most 255 instructions ahead, and the
// verify code is thousands away, so each group of positions ends with a
// two-instruction hop (ja over it; ja verify) that its matches jump to.
// Six instructions per position: the first match of a group is 6*43-3 =
// 255 instructions before its hop.
const positionsPerHop = 43

// program builds the program for a scan window of window positions (tests
// build it one position wider to show Window is the largest that fits).
//
// Layout, all jumps forward (classic BPF has no others):
//
//	scan:   per position p: X = p; A = word[p] folded; match? hop; ...
//	        after the last position: return 0
//	verify: tell "\nCAL" from "\nI" by byte p+1; check the rest; X = value
//	skip:   up to two SP/HTAB
//	hash:   MaxHashed unrolled steps; A = the top bits of h × fibonacci
//	table:  a binary search over the bucket, returning t[bucket]
func program(t *Table, window int) []unix.SockFilter {
	var a asm
	verify := a.label()
	for g := 0; g < window; g += positionsPerHop {
		hop := verify
		last := g+positionsPerHop >= window
		if !last {
			hop = a.label()
		}
		for p := g; p < min(g+positionsPerHop, window); p++ {
			a.op(unix.BPF_LDX|unix.BPF_W|unix.BPF_IMM, uint32(p))
			a.op(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, uint32(p)) // out of bounds: the packet ended, return 0
			a.op(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, scanMask)
			a.jeq(callWord, hop, next)
			a.op(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, compactMask)
			a.jeq(compactWord, hop, next)
		}
		if last {
			a.ret(0)
		} else {
			after := a.label()
			a.ja(after)
			a.mark(hop)
			a.ja(verify)
			a.mark(after)
		}
	}

	// X = p, the '\n'. Both matches fold byte p+1: 'C' or 'I'.
	a.mark(verify)
	long, skip, fail := a.label(), a.label(), a.label()
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 1)
	a.op(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, letterMask)
	a.jeq('C', long, next)
	// "\nI" plus ':' or 0x1a: only ':' goes on.
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 2)
	a.jeq(':', next, fail)
	a.addX(compValueOff)
	a.ja(skip)
	a.mark(long)
	a.op(unix.BPF_LD|unix.BPF_W|unix.BPF_IND, 4)
	a.op(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, restMask)
	a.jeq(restWord, next, fail)
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 8)
	a.jeq(':', next, fail)
	a.addX(callValueOff)

	// X = the byte after the colon.
	a.mark(skip)
	hash := a.label()
	for range maxSkip {
		space := a.label()
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 0)
		a.jeq(' ', space, next)
		a.jeq('\t', space, hash)
		a.mark(space)
		a.addX(1)
	}

	// X = the value. h = b0, then h = h*31 + b for each later byte; a byte
	// <= 0x20 ends the value (before the first: empty, the door).
	a.mark(hash)
	done := a.label()
	first := a.label()
	a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 0)
	a.jgt(' ', first, next)
	a.mark(fail)
	a.ret(0)
	// The kernel's check of scratch memory reads the program as straight
	// lines with jumps, a return included: what is stored before this
	// return does not count as stored after it.
	a.mark(first)
	a.op(unix.BPF_STX, memBase)
	a.op(unix.BPF_ST, memH)
	a.op(unix.BPF_ALU|unix.BPF_MUL|unix.BPF_K, 31)
	a.op(unix.BPF_ST, memH31)
	for k := 1; k < MaxHashed; k++ {
		a.op(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, uint32(k))
		a.jgt(' ', next, done)
		a.op(unix.BPF_LDX|unix.BPF_W|unix.BPF_MEM, memH31)
		a.op(unix.BPF_ALU|unix.BPF_ADD|unix.BPF_X, 0)
		a.op(unix.BPF_ST, memH)
		if k < MaxHashed-1 {
			a.op(unix.BPF_ALU|unix.BPF_MUL|unix.BPF_K, 31)
			a.op(unix.BPF_ST, memH31)
			a.op(unix.BPF_LDX|unix.BPF_W|unix.BPF_MEM, memBase)
		}
	}
	a.mark(done)
	a.op(unix.BPF_LD|unix.BPF_W|unix.BPF_MEM, memH)
	a.op(unix.BPF_ALU|unix.BPF_MUL|unix.BPF_K, fibonacci)
	a.op(unix.BPF_ALU|unix.BPF_RSH|unix.BPF_K, 32-bucketBits)

	// A = the bucket.
	a.table(t, 0, Buckets)
	return a.assemble()
}

// asm is a small assembler: it lets the program jump to labels and checks
// that every conditional jump fits its 8-bit offset.
type asm struct {
	ins    []unix.SockFilter
	at     []int // label -> instruction index, -1 until marked
	fixups []fixup
}

type label int

// next, as a conditional jump's target, is the following instruction.
const next label = -1

type fixup struct {
	ins    int
	jt, jf label // conditional jump
	ja     label // unconditional jump, when >= 0
}

func (a *asm) label() label {
	a.at = append(a.at, -1)
	return label(len(a.at) - 1)
}

func (a *asm) mark(l label) { a.at[l] = len(a.ins) }

func (a *asm) op(code uint16, k uint32) {
	a.ins = append(a.ins, unix.SockFilter{Code: code, K: k})
}

func (a *asm) ret(k uint32) { a.op(unix.BPF_RET|unix.BPF_K, k) }

// addX adds k to X (through A, the only register with arithmetic).
func (a *asm) addX(k uint32) {
	a.op(unix.BPF_MISC|unix.BPF_TXA, 0)
	a.op(unix.BPF_ALU|unix.BPF_ADD|unix.BPF_K, k)
	a.op(unix.BPF_MISC|unix.BPF_TAX, 0)
}

func (a *asm) jump(code uint16, k uint32, jt, jf label) {
	a.fixups = append(a.fixups, fixup{ins: len(a.ins), jt: jt, jf: jf, ja: -1})
	a.op(unix.BPF_JMP|code|unix.BPF_K, k)
}

func (a *asm) jeq(k uint32, jt, jf label) { a.jump(unix.BPF_JEQ, k, jt, jf) }
func (a *asm) jgt(k uint32, jt, jf label) { a.jump(unix.BPF_JGT, k, jt, jf) }
func (a *asm) jge(k uint32, jt, jf label) { a.jump(unix.BPF_JGE, k, jt, jf) }

func (a *asm) ja(l label) {
	a.fixups = append(a.fixups, fixup{ins: len(a.ins), ja: l})
	a.op(unix.BPF_JMP|unix.BPF_JA, 0)
}

// table returns t[A] for A in [lo, hi): a balanced binary search, so each
// jump skips at most one half (63 instructions for 64 buckets).
func (a *asm) table(t *Table, lo, hi int) {
	if hi-lo == 1 {
		a.ret(uint32(t[lo]))
		return
	}
	mid := (lo + hi) / 2
	upper := a.label()
	a.jge(uint32(mid), upper, next)
	a.table(t, lo, mid)
	a.mark(upper)
	a.table(t, mid, hi)
}

// assemble resolves the jumps. A jump that cannot be encoded is a bug in
// program, not a condition of the input, hence the panic.
func (a *asm) assemble() []unix.SockFilter {
	off := func(from int, l label) int {
		if l == next {
			return 0
		}
		to := a.at[l]
		if to < 0 {
			panic(fmt.Sprintf("steer: label %d never marked", l))
		}
		d := to - from - 1
		if d < 0 {
			panic(fmt.Sprintf("steer: backward jump at %d", from))
		}
		return d
	}
	for _, f := range a.fixups {
		if f.ja >= 0 {
			a.ins[f.ins].K = uint32(off(f.ins, f.ja))
			continue
		}
		jt, jf := off(f.ins, f.jt), off(f.ins, f.jf)
		if jt > 255 || jf > 255 {
			panic(fmt.Sprintf("steer: conditional jump at %d too far (%d, %d)", f.ins, jt, jf))
		}
		a.ins[f.ins].Jt, a.ins[f.ins].Jf = uint8(jt), uint8(jf)
	}
	return a.ins
}
