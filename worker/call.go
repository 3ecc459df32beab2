package worker

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
)

// ErrCallTimeout: the supervisor did not answer a call in time.
var ErrCallTimeout = errors.New("supervisor did not answer in time")

// callTimeout bounds a call; the supervisor answers from memory, so only a
// stuck supervisor takes this long.
const callTimeout = 5 * time.Second

// caller makes calls to the supervisor over the control channel and reads
// each answer itself. A reader goroutine handing answers over a channel cost
// a goroutine hand-off, and often a thread wake-up, per call (a REGISTER's
// save is one). Calls are one at a time; an answer with another id is one
// to a call that timed out, and is skipped.
type caller struct {
	ctl  *wire.ControlConn
	mu   sync.Mutex
	next uint64
	msg  []byte
	buf  []byte
}

func newCaller(ctl *wire.ControlConn) *caller {
	return &caller{ctl: ctl, buf: make([]byte, wire.MaxCall+9)}
}

func (c *caller) call(req []byte) ([]byte, error) {
	if len(req) > wire.MaxCall {
		return nil, errors.New("call request too large")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	id := c.next
	c.msg = append(c.msg[:0], wire.CtlCall)
	c.msg = binary.BigEndian.AppendUint64(c.msg, id)
	c.msg = append(c.msg, req...)
	if _, err := c.ctl.Write(c.msg); err != nil {
		return nil, err
	}
	c.ctl.SetReadDeadline(time.Now().Add(callTimeout))
	for {
		n, err := c.ctl.Read(c.buf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, ErrCallTimeout
		case err != nil:
			return nil, err
		case n >= 9 && c.buf[0] == wire.CtlAnswer && binary.BigEndian.Uint64(c.buf[1:9]) == id:
			return append([]byte(nil), c.buf[9:n]...), nil
		}
	}
}
