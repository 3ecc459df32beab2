package txn

import (
	"hash/maphash"
	"time"
	"unsafe"
)

// Settled is a server transaction and its one branch that have nothing
// left to do but linger over UDP (RFC 6026, timers J and K): an INVITE's
// pair in Accepted after its 2xx, a non-INVITE's after its final reply.
// What that needs is its keys, the reply a retransmitted request gets
// again (a non-INVITE's final; an INVITE in Accepted sends none), and
// where replies go upstream, written by the owner into Up. The engine's
// transactions, some 850 bytes a pair, go back to their owner at once
// (Table.Settle); a settled record is the size of its keys and reply.
//
// At thousands of calls a second a worker holds the transactions of the
// last Linger of calls, two pairs a call (its INVITE's and its BYE's):
// that was most of its heap.
//
// The fields are in the order that packs them in 48 bytes, a ring's slot.
type Settled struct {
	b          string // the keys then the reply, in the table's arena
	sk, dk, ck uint32 // ends of the server, dialog and client keys in b
	Invite     bool
	at         int64 // when it ends, unix ns
	// Up is the owner's note of where replies go upstream.
	Up uint64
}

// ServerKey is the key of the settled server transaction.
func (r *Settled) ServerKey() string { return r.b[:r.sk] }

// DialogKey is the settled INVITE's dialog key, "" for another request.
func (r *Settled) DialogKey() string { return r.b[r.sk:r.dk] }

// ClientKey is the key of the settled branch.
func (r *Settled) ClientKey() string { return r.b[r.dk:r.ck] }

// Last is the reply a retransmitted request gets again, nil for none. It
// is read only: its bytes are the table's.
func (r *Settled) Last() []byte {
	if int(r.ck) == len(r.b) {
		return nil
	}
	last := r.b[r.ck:]
	return unsafe.Slice(unsafe.StringData(last), len(last))[:len(last):len(last)]
}

const (
	// chunkSize is the arena's unit: the keys and replies of a few
	// hundred settled pairs.
	chunkSize = 32 << 10
	// ownChunk is the most a record's bytes take from a chunk; a larger
	// reply gets memory of its own.
	ownChunk = chunkSize / 8
	// spareChunks is how many emptied chunks wait for reuse.
	spareChunks = 4
)

// settledSet is a table's settled records. They all end Linger after they
// were settled, so they end in the order they came: a ring of records
// rather than the heap, and an arena their bytes are appended to and
// freed from in that order, a chunk at a time, rather than memory of
// their own. Settling allocates nothing once the ring and the arena have
// grown to the rate's size.
//
// The indexes go by a hash of the key, which a lookup checks against the
// record's key (index): an entry takes 8 bytes, where one of the key's
// string in a map took 24, and the maps were as much of a lingering call's
// memory as its records.
type settledSet struct {
	seed                      maphash.Seed
	servers, dialogs, clients index     // by hash of the key, the low half of the sequence number
	ring                      []Settled // by sequence number modulo its length, a power of 2
	head, tail                uint64    // sequence numbers of the oldest record and the next
	chunks                    []chunk   // the arena, oldest first; the last is written to
	spare                     [][]byte
}

// chunk is part of the arena and the sequence number after the last
// record written in it.
type chunk struct {
	b   []byte
	end uint64
}

func newSettledSet() settledSet {
	return settledSet{seed: maphash.MakeSeed()}
}

func (s *settledSet) len() int { return int(s.tail - s.head) }

// at is the record of sequence number seq.
func (s *settledSet) at(seq uint64) *Settled { return &s.ring[seq&uint64(len(s.ring)-1)] }

// store copies parts into the arena as one string.
func (s *settledSet) store(n int, parts ...string) string {
	var b []byte
	if n > ownChunk {
		b = make([]byte, 0, n)
	} else {
		last := len(s.chunks) - 1
		if last < 0 || cap(s.chunks[last].b)-len(s.chunks[last].b) < n {
			var c []byte
			if k := len(s.spare); k > 0 {
				c, s.spare[k-1] = s.spare[k-1], nil
				s.spare = s.spare[:k-1]
			} else {
				c = make([]byte, 0, chunkSize)
			}
			s.chunks = append(s.chunks, chunk{b: c})
			last++
		}
		c := &s.chunks[last]
		c.end = s.tail + 1
		start := len(c.b)
		for _, p := range parts {
			c.b = append(c.b, p...)
		}
		b = c.b[start:]
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// add enters a record of the keys and last, ending at at.
func (s *settledSet) add(server, dialog, client string, last []byte, invite bool, up uint64, at time.Time) {
	if s.len() == len(s.ring) {
		s.grow()
	}
	n := len(server) + len(dialog) + len(client) + len(last)
	b := s.store(n, server, dialog, client, unsafe.String(unsafe.SliceData(last), len(last)))
	seq := s.tail
	s.tail++
	sk, dk := uint32(len(server)), uint32(len(server)+len(dialog))
	r := s.at(seq)
	*r = Settled{b: b, sk: sk, dk: dk, ck: dk + uint32(len(client)), at: at.UnixNano(), Up: up, Invite: invite}
	// A later record of a key takes the earlier one's place.
	id := uint32(seq)
	s.servers.put(s.hash(server), id, func(id uint32) bool { return s.byID(id).ServerKey() == server })
	if dialog != "" {
		s.dialogs.put(s.hash(dialog), id, func(id uint32) bool { return s.byID(id).DialogKey() == dialog })
	}
	s.clients.put(s.hash(client), id, func(id uint32) bool { return s.byID(id).ClientKey() == client })
}

// byID is the record whose sequence number's low half is id: the records
// held lie within 2^32 of head.
func (s *settledSet) byID(id uint32) *Settled { return s.at(s.head + uint64(id-uint32(s.head))) }

// grow doubles the ring, keeping each record at its sequence number.
func (s *settledSet) grow() {
	n := max(2*len(s.ring), 64)
	ring := make([]Settled, n)
	for seq := s.head; seq < s.tail; seq++ {
		ring[seq&uint64(n-1)] = *s.at(seq)
	}
	s.ring = ring
}

// expire ends the records due at now.
func (s *settledSet) expire(now time.Time) {
	ns := now.UnixNano()
	for s.head < s.tail {
		r := s.at(s.head)
		if r.at > ns {
			break
		}
		id := uint32(s.head)
		s.servers.remove(s.hash(r.ServerKey()), id)
		if r.dk > r.sk {
			s.dialogs.remove(s.hash(r.DialogKey()), id)
		}
		s.clients.remove(s.hash(r.ClientKey()), id)
		*r = Settled{}
		s.head++
	}
	// A chunk's bytes are free once its last record has ended; the one
	// written to is emptied in place when nothing is left.
	for len(s.chunks) > 0 && s.chunks[0].end <= s.head {
		c := s.chunks[0].b[:0]
		if len(s.chunks) == 1 {
			s.chunks[0] = chunk{b: c}
			break
		}
		if len(s.spare) < spareChunks {
			s.spare = append(s.spare, c)
		}
		n := copy(s.chunks, s.chunks[1:])
		s.chunks[n] = chunk{}
		s.chunks = s.chunks[:n]
	}
}

// next is when the oldest record ends.
func (s *settledSet) next() (time.Time, bool) {
	if s.head == s.tail {
		return time.Time{}, false
	}
	return time.Unix(0, s.at(s.head).at), true
}

func (s *settledSet) hash(k string) uint64 { return maphash.String(s.seed, k) }

// find is the record whose key, as key reads it, is k, by index ix.
func (s *settledSet) find(ix *index, k []byte, key func(*Settled) string) *Settled {
	id, ok := ix.find(maphash.Bytes(s.seed, k), func(id uint32) bool { return key(s.byID(id)) == string(k) })
	if !ok {
		return nil
	}
	return s.byID(id)
}
