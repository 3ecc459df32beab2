package steer

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// run interprets a classic BPF program over a payload with the kernel's
// semantics for what the package's programs use: a load beyond the packet
// ends the program returning 0, ALU is 32-bit, jumps compare unsigned. It
// lets the fuzz test hold Program and Locate together on inputs no socket
// test would think of; the kernel tests check it against the real thing.
func run(prog []unix.SockFilter, pkt []byte) (uint32, error) {
	var a, x uint32
	var mem [unix.BPF_MEMWORDS]uint32
	load := func(off uint32, size int) (uint32, bool) {
		if uint64(off)+uint64(size) > uint64(len(pkt)) {
			return 0, false
		}
		switch size {
		case 4:
			return binary.BigEndian.Uint32(pkt[off:]), true
		case 2:
			return uint32(binary.BigEndian.Uint16(pkt[off:])), true
		}
		return uint32(pkt[off]), true
	}
	sizes := map[uint16]int{unix.BPF_W: 4, unix.BPF_H: 2, unix.BPF_B: 1}
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		code, k := ins.Code, ins.K
		switch code & 0x07 {
		case unix.BPF_LD:
			switch code & 0xe0 {
			case unix.BPF_ABS, unix.BPF_IND:
				off := k
				if code&0xe0 == unix.BPF_IND {
					off = x + k
				}
				v, ok := load(off, sizes[code&0x18])
				if !ok {
					return 0, nil
				}
				a = v
			case unix.BPF_IMM:
				a = k
			case unix.BPF_MEM:
				a = mem[k]
			case unix.BPF_LEN:
				a = uint32(len(pkt))
			default:
				return 0, fmt.Errorf("pc %d: ld mode %#x", pc, code)
			}
		case unix.BPF_LDX:
			switch code & 0xe0 {
			case unix.BPF_IMM:
				x = k
			case unix.BPF_MEM:
				x = mem[k]
			case unix.BPF_LEN:
				x = uint32(len(pkt))
			default:
				return 0, fmt.Errorf("pc %d: ldx mode %#x", pc, code)
			}
		case unix.BPF_ST:
			mem[k] = a
		case unix.BPF_STX:
			mem[k] = x
		case unix.BPF_ALU:
			src := k
			if code&unix.BPF_X != 0 {
				src = x
			}
			switch code & 0xf0 {
			case unix.BPF_ADD:
				a += src
			case unix.BPF_SUB:
				a -= src
			case unix.BPF_MUL:
				a *= src
			case unix.BPF_DIV, unix.BPF_MOD:
				if src == 0 {
					return 0, nil
				}
				if code&0xf0 == unix.BPF_DIV {
					a /= src
				} else {
					a %= src
				}
			case unix.BPF_AND:
				a &= src
			case unix.BPF_OR:
				a |= src
			case unix.BPF_LSH:
				a <<= src & 31
			case unix.BPF_RSH:
				a >>= src & 31
			default:
				return 0, fmt.Errorf("pc %d: alu op %#x", pc, code)
			}
		case unix.BPF_JMP:
			if code&0xf0 == unix.BPF_JA {
				pc += int(k)
				continue
			}
			src := k
			if code&unix.BPF_X != 0 {
				src = x
			}
			var taken bool
			switch code & 0xf0 {
			case unix.BPF_JEQ:
				taken = a == src
			case unix.BPF_JGT:
				taken = a > src
			case unix.BPF_JGE:
				taken = a >= src
			case unix.BPF_JSET:
				taken = a&src != 0
			default:
				return 0, fmt.Errorf("pc %d: jmp op %#x", pc, code)
			}
			if taken {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		case unix.BPF_RET:
			if code&0x18 == unix.BPF_A {
				return a, nil
			}
			return k, nil
		case unix.BPF_MISC:
			if code&0xf8 == unix.BPF_TXA {
				a = x
			} else {
				x = a
			}
		}
	}
	return 0, fmt.Errorf("ran off the end")
}

// checkMemory is the kernel's check that no scratch cell is read before it
// is written (check_load_and_stores in net/core/filter.c). It reads the
// program as straight lines: a return does not end a line, so a cell stored
// before a return and read after it is refused, though no run could do so.
func checkMemory(prog []unix.SockFilter) error {
	masks := make([]uint16, len(prog))
	for i := range masks {
		masks[i] = 0xffff
	}
	var valid uint16
	for pc, ins := range prog {
		valid &= masks[pc]
		switch {
		case ins.Code == unix.BPF_ST || ins.Code == unix.BPF_STX:
			valid |= 1 << ins.K
		case ins.Code == unix.BPF_LD|unix.BPF_W|unix.BPF_MEM || ins.Code == unix.BPF_LDX|unix.BPF_W|unix.BPF_MEM:
			if valid&(1<<ins.K) == 0 {
				return fmt.Errorf("pc %d reads M[%d] before a store", pc, ins.K)
			}
		case ins.Code == unix.BPF_JMP|unix.BPF_JA:
			masks[pc+1+int(ins.K)] &= valid
			valid = 0xffff
		case ins.Code&0x07 == unix.BPF_JMP:
			masks[pc+1+int(ins.Jt)] &= valid
			masks[pc+1+int(ins.Jf)] &= valid
			valid = 0xffff
		}
	}
	return nil
}
