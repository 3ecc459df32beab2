package location

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The wire format of a Store call over the control channel. A REGISTER
// pays for its call four times (request and answer, each written by one
// process and read by the other), so the format is binary and is read
// without reflection:
//
//	request:  'L' op aor contact flag [binding] now
//	response: n err count binding...
//	binding:  aor contact expires call-id cseq received proto user-agent
//	          instance reg-id path
//
// A string is its length (uvarint) and its bytes, n and now are varints,
// cseq a uvarint, flag a byte (1: a binding follows), and a time its Unix
// nanoseconds as a varint, 0 for the zero time. Trailing bytes are an error.

// Operations, the request's second byte.
const (
	opSave     = 's'
	opRegister = 'r'
	opLookup   = 'l'
	opRemove   = 'x'
	opExpire   = 'e'
	opList     = 'a'
	opReport   = 'f'
)

// minBinding is the fewest bytes a binding takes (eleven empty or zero
// fields), which bounds the count a response may claim.
const minBinding = 11

var errTruncated = errors.New("truncated")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

func appendBinding(b []byte, x *Binding) []byte {
	b = appendString(b, x.AOR)
	b = appendString(b, x.Contact)
	b = appendTime(b, x.Expires)
	b = appendString(b, x.CallID)
	b = binary.AppendUvarint(b, uint64(x.CSeq))
	b = appendString(b, x.Received)
	b = appendString(b, x.Proto)
	b = appendString(b, x.UserAgent)
	b = appendString(b, x.Instance)
	b = appendString(b, x.RegID)
	return appendString(b, x.Path)
}

func (q *request) append(b []byte) []byte {
	b = append(b, RequestTag, q.Op)
	b = appendString(b, q.AOR)
	b = appendString(b, q.Contact)
	if q.Binding == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendBinding(b, q.Binding)
	}
	return binary.AppendVarint(b, q.Now)
}

func (r *response) append(b []byte) []byte {
	b = binary.AppendVarint(b, int64(r.N))
	b = appendString(b, r.Err)
	b = binary.AppendUvarint(b, uint64(len(r.Bindings)))
	for i := range r.Bindings {
		b = appendBinding(b, &r.Bindings[i])
	}
	return b
}

// reader reads the fields in order; the first failure sticks, and every
// read after it returns zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string, err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %w", what, err)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(what, errTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what, errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint undoes binary.AppendVarint's zig-zag on top of a uvarint.
func (r *reader) varint(what string) int64 {
	u := r.uvarint(what)
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (r *reader) string(what string) string {
	n := r.uvarint(what)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail(what, fmt.Errorf("%d bytes, %d left", n, len(r.b)))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) time(what string) time.Time {
	if ns := r.varint(what); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (r *reader) binding() Binding {
	x := r.fields()
	r.outbound(&x)
	return x
}

// base reads a binding as stores wrote it before outbound (Redis values
// live across upgrades): the fields after user-agent only when present.
func (r *reader) base() Binding {
	x := r.fields()
	if r.err == nil && len(r.b) > 0 {
		r.outbound(&x)
	}
	return x
}

// fields reads a binding's fields up to its user-agent, which every
// version of the format has.
func (r *reader) fields() Binding {
	var x Binding
	x.AOR = r.string("aor")
	x.Contact = r.string("contact")
	x.Expires = r.time("expires")
	x.CallID = r.string("call-id")
	cseq := r.uvarint("cseq")
	if cseq > 1<<32-1 {
		r.fail("cseq", fmt.Errorf("%d over 2^32-1", cseq))
	}
	x.CSeq = uint32(cseq)
	x.Received = r.string("received")
	x.Proto = r.string("proto")
	x.UserAgent = r.string("user-agent")
	return x
}

func (r *reader) outbound(x *Binding) {
	x.Instance = r.string("instance")
	x.RegID = r.string("reg-id")
	x.Path = r.string("path")
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes after the end", len(r.b))
	}
	return r.err
}

// parseRequest reads a request after its tag byte.
func parseRequest(b []byte) (request, error) {
	r := reader{b: b}
	var q request
	q.Op = r.byte("operation")
	q.AOR = r.string("aor")
	q.Contact = r.string("contact")
	switch r.byte("binding flag") {
	case 0:
	case 1:
		x := r.binding()
		q.Binding = &x
	default:
		r.fail("binding flag", errors.New("neither 0 nor 1"))
	}
	q.Now = r.varint("now")
	return q, r.end()
}

func parseResponse(b []byte) (response, error) {
	r := reader{b: b}
	var resp response
	resp.N = int(r.varint("n"))
	resp.Err = r.string("error")
	n := r.uvarint("bindings")
	if r.err == nil && n > uint64(len(r.b)/minBinding) {
		r.fail("bindings", fmt.Errorf("%d in %d bytes", n, len(r.b)))
	}
	if r.err == nil && n > 0 {
		resp.Bindings = make([]Binding, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			resp.Bindings = append(resp.Bindings, r.binding())
		}
	}
	return resp, r.end()
}
