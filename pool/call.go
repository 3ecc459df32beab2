package pool

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// ErrCallTimeout: the supervisor did not answer a call in time.
var ErrCallTimeout = errors.New("supervisor did not answer in time")

// callTimeout bounds a call; the supervisor answers from memory, so only a
// stuck supervisor takes this long.
const callTimeout = 5 * time.Second

// caller matches answers on the control channel to waiting calls by id.
type caller struct {
	ctl     net.Conn
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan []byte
}

func newCaller(ctl net.Conn) *caller {
	return &caller{ctl: ctl, waiting: map[uint64]chan []byte{}}
}

func (c *caller) call(req []byte) ([]byte, error) {
	if len(req) > maxCall {
		return nil, errors.New("call request too large")
	}
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.next++
	id := c.next
	c.waiting[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	msg := make([]byte, 9, 9+len(req))
	msg[0] = ctlCall
	binary.BigEndian.PutUint64(msg[1:9], id)
	msg = append(msg, req...)
	if _, err := c.ctl.Write(msg); err != nil {
		return nil, err
	}
	select {
	case ans := <-ch:
		return ans, nil
	case <-time.After(callTimeout):
		return nil, ErrCallTimeout
	}
}

// answer delivers b (id, payload) to its call; the payload is copied because
// the reader reuses its buffer.
func (c *caller) answer(b []byte) {
	id := binary.BigEndian.Uint64(b[:8])
	c.mu.Lock()
	ch := c.waiting[id]
	c.mu.Unlock()
	if ch != nil {
		ch <- append([]byte(nil), b[8:]...)
	}
}
