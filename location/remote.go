package location

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// RequestTag is the first byte of every location request on the control
// channel, so the supervisor's call handler can tell them from other calls.
const RequestTag = 'L'

// IsRequest reports whether a control-channel call is a location request.
func IsRequest(req []byte) bool { return len(req) > 0 && req[0] == RequestTag }

// request is one Store call (wire.go has its encoding).
type request struct {
	Op      byte
	AOR     string
	Contact string
	Binding *Binding
	Now     int64 // unix nanoseconds, for expire
}

type response struct {
	Bindings []Binding
	N        int
	Err      string
}

// Remote is a Store whose bindings live in another process, reached by a
// request/response call (the worker's env.Call).
type Remote struct {
	call func([]byte) ([]byte, error)
}

// NewRemote returns a Store that sends each call through call, to be
// answered by Serve on the other side.
func NewRemote(call func([]byte) ([]byte, error)) *Remote { return &Remote{call: call} }

func (r *Remote) do(q request) (response, error) {
	out, err := r.call(q.append(make([]byte, 0, 256)))
	if err != nil {
		// The supervisor is stuck or gone: as for any store out of reach.
		return response{}, unavailable(fmt.Errorf("location %s: %w", opName(q.Op), err))
	}
	resp, err := parseResponse(out)
	if err != nil {
		return response{}, fmt.Errorf("location %s: bad answer: %w", opName(q.Op), err)
	}
	if resp.Err != "" {
		err := fmt.Errorf("location %s: %s", opName(q.Op), resp.Err)
		if strings.HasPrefix(resp.Err, ErrUnavailable.Error()) {
			err = unavailable(err)
		}
		return resp, err
	}
	return resp, nil
}

func opName(op byte) string {
	switch op {
	case opSave:
		return "save"
	case opRegister:
		return "register"
	case opLookup:
		return "lookup"
	case opRemove:
		return "remove"
	case opExpire:
		return "expire"
	case opList:
		return "list"
	case opReport:
		return "report"
	}
	return fmt.Sprintf("%q", op)
}

// Save implements Store.
func (r *Remote) Save(aor string, b Binding) error {
	_, err := r.do(request{Op: opSave, AOR: aor, Binding: &b})
	return err
}

// Register implements Store: the save's answer carries the bindings.
func (r *Remote) Register(aor string, b Binding) ([]Binding, error) {
	resp, err := r.do(request{Op: opRegister, AOR: aor, Binding: &b})
	return resp.Bindings, err
}

// Lookup implements Store.
func (r *Remote) Lookup(aor string) ([]Binding, error) {
	resp, err := r.do(request{Op: opLookup, AOR: aor})
	return resp.Bindings, err
}

// Remove implements Store.
func (r *Remote) Remove(aor, contact string) error {
	_, err := r.do(request{Op: opRemove, AOR: aor, Contact: contact})
	return err
}

// Expire implements Store.
func (r *Remote) Expire(now time.Time) (int, error) {
	resp, err := r.do(request{Op: opExpire, Now: now.UnixNano()})
	return resp.N, err
}

// List implements Store.
func (r *Remote) List() ([]Binding, error) {
	resp, err := r.do(request{Op: opList})
	return resp.Bindings, err
}

// Close implements Store; the store itself belongs to the other side.
func (r *Remote) Close() error { return nil }

// ErrorReport is a worker's report of n store calls that failed since its
// last, for the supervisor's metric; the answer is empty.
func ErrorReport(n uint64) []byte {
	return (&request{Op: opReport, Now: int64(n)}).append(make([]byte, 0, 16))
}

// ParseErrorReport reads an ErrorReport.
func ParseErrorReport(req []byte) (uint64, bool) {
	if !IsRequest(req) || len(req) < 2 || req[1] != opReport {
		return 0, false
	}
	q, err := parseRequest(req[1:])
	if err != nil || q.Now < 0 {
		return 0, false
	}
	return uint64(q.Now), true
}

// ErrNotLocation is reported (in the answer) for a call that is not a
// location request.
var ErrNotLocation = errors.New("not a location request")

// Serve answers one request made by a Remote against store. It never fails:
// a bad request gets an answer that carries the reason.
func Serve(store Store, req []byte) []byte {
	resp := serve(store, req)
	return resp.append(make([]byte, 0, 64+96*len(resp.Bindings)))
}

func serve(store Store, req []byte) response {
	if !IsRequest(req) {
		return response{Err: ErrNotLocation.Error()}
	}
	q, err := parseRequest(req[1:])
	if err != nil {
		return response{Err: "bad request: " + err.Error()}
	}
	var resp response
	switch q.Op {
	case opSave:
		if q.Binding == nil {
			return response{Err: "save without a binding"}
		}
		err = store.Save(q.AOR, *q.Binding)
	case opRegister:
		if q.Binding == nil {
			return response{Err: "register without a binding"}
		}
		resp.Bindings, err = store.Register(q.AOR, *q.Binding)
	case opLookup:
		resp.Bindings, err = store.Lookup(q.AOR)
	case opRemove:
		err = store.Remove(q.AOR, q.Contact)
	case opExpire:
		resp.N, err = store.Expire(time.Unix(0, q.Now))
	case opList:
		resp.Bindings, err = store.List()
	case opReport:
		// Counted by the caller of Serve, which has the metrics.
	default:
		return response{Err: fmt.Sprintf("unknown operation %s", opName(q.Op))}
	}
	if err != nil {
		resp.Err = err.Error()
	}
	return resp
}
