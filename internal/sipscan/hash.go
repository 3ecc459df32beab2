package sipscan

import (
	"encoding/binary"
	"math/bits"
)

// CallIDHash hashes a Call-ID for the front door's affinity table. It is
// fixed (the same in every process and release) so that any process that
// sees a Call-ID computes the same value, and it reads eight bytes per step
// so that long Call-IDs stay cheap. It is not meant to resist chosen
// collisions: a sender can only collide its own Call-IDs with each other.
func CallIDHash(callID []byte) uint64 {
	return hashBytes(hashSeed, callID)
}

const (
	hashSeed = 0x9e3779b97f4a7c15
	hashMulA = 0xbf58476d1ce4e5b9
	hashMulB = 0x94d049bb133111eb
)

func hashBytes(h uint64, b []byte) uint64 {
	h ^= uint64(len(b)) * hashMulA
	for len(b) >= 8 {
		h ^= binary.LittleEndian.Uint64(b)
		h = bits.RotateLeft64(h*hashMulA, 31) * hashMulB
		b = b[8:]
	}
	var tail uint64
	for i, c := range b {
		tail |= uint64(c) << (8 * i)
	}
	h ^= tail
	h = bits.RotateLeft64(h*hashMulA, 31) * hashMulB
	// Final avalanche (splitmix64), so that low bits used as a bucket index
	// depend on every input byte.
	h ^= h >> 30
	h *= hashMulA
	h ^= h >> 27
	h *= hashMulB
	h ^= h >> 31
	return h
}
