// Package ticketkey holds the keys TLS session tickets are sealed with,
// shared by every worker of one supervisor, so that a client resumes its
// session on whichever worker its next connection reaches: a worker
// scaled down hands its connections to another, and a client's next
// connection is placed anew.
//
// The keys form a ratchet on the wall clock: the key of period n+1 is a
// one-way function of the key of period n. The supervisor makes a random
// key when it starts and gives each worker it spawns the current key, the
// previous one and their period; each worker then steps forward by itself
// as periods pass, with no message to keep them in step (processes of one
// machine share its clock). A ticket is sealed with the current key and
// opened with the current or the previous one, so it resumes for one to two
// periods; a key leaked today opens no ticket sealed before yesterday, as
// no earlier key can be computed from it.
package ticketkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"
	"time"
)

// Period is how long a key seals new tickets.
const Period = 24 * time.Hour

// Size is the length of Ratchet's encoding.
const Size = 8 + 1 + 2*32

// Ratchet is the keys of one period and the one before.
type Ratchet struct {
	period int64 // Unix time / Period
	cur    [32]byte
	prev   [32]byte
	// hasPrev: prev is a key (a ratchet made this period has none).
	hasPrev bool
}

func periodOf(t time.Time) int64 { return t.Unix() / int64(Period/time.Second) }

// New makes a ratchet with a random key for the period of now.
func New(now time.Time) (*Ratchet, error) {
	r := &Ratchet{period: periodOf(now)}
	if _, err := rand.Read(r.cur[:]); err != nil {
		return nil, err
	}
	return r, nil
}

func step(k [32]byte) (next [32]byte) {
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte("sipvisor session ticket key ratchet"))
	copy(next[:], m.Sum(nil))
	return next
}

// Advance steps the ratchet to the period of now, reporting whether it
// moved. A clock that went back leaves it where it is: a key once
// forgotten cannot come back.
func (r *Ratchet) Advance(now time.Time) bool {
	p := periodOf(now)
	if p <= r.period {
		return false
	}
	for ; r.period < p; r.period++ {
		r.prev, r.hasPrev = r.cur, true
		r.cur = step(r.cur)
	}
	return true
}

// Keys are the keys for tls.Config.SetSessionTicketKeys: the current one
// first (it seals), then the previous one (it only opens).
func (r *Ratchet) Keys() [][32]byte {
	if r.hasPrev {
		return [][32]byte{r.cur, r.prev}
	}
	return [][32]byte{r.cur}
}

// MarshalBinary encodes the ratchet in Size bytes.
func (r *Ratchet) MarshalBinary() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, Size), uint64(r.period))
	flag := byte(1)
	if r.hasPrev {
		flag = 3
	}
	b = append(b, flag)
	b = append(b, r.cur[:]...)
	return append(b, r.prev[:]...), nil
}

// ErrNone is what UnmarshalBinary says of Size zero bytes: no ratchet was
// given.
var ErrNone = errors.New("no session ticket keys")

// UnmarshalBinary reads what MarshalBinary wrote.
func (r *Ratchet) UnmarshalBinary(b []byte) error {
	if len(b) != Size {
		return errors.New("session ticket keys: wrong length")
	}
	switch b[8] {
	case 0:
		return ErrNone
	case 1, 3:
	default:
		return errors.New("session ticket keys: unknown format")
	}
	r.period = int64(binary.BigEndian.Uint64(b))
	r.hasPrev = b[8] == 3
	copy(r.cur[:], b[9:41])
	copy(r.prev[:], b[41:73])
	return nil
}

// Keeper is a Ratchet used from several goroutines.
type Keeper struct {
	mu sync.Mutex
	r  *Ratchet
}

// NewKeeper makes a keeper of a new ratchet.
func NewKeeper(now time.Time) (*Keeper, error) {
	r, err := New(now)
	if err != nil {
		return nil, err
	}
	return &Keeper{r: r}, nil
}

// At is the ratchet's encoding, advanced to now.
func (k *Keeper) At(now time.Time) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.r.Advance(now)
	b, _ := k.r.MarshalBinary()
	return b
}
