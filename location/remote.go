package location

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// RequestTag is the first byte of every location request on the control
// channel, so the supervisor's call handler can tell them from other calls.
const RequestTag = 'L'

// IsRequest reports whether a control-channel call is a location request.
func IsRequest(req []byte) bool { return len(req) > 0 && req[0] == RequestTag }

// request is one Store call. JSON is enough: a lookup costs a few
// microseconds of encoding next to the round trip over the control channel
// (see BenchmarkRemoteLookup), and the format reads well in a packet dump.
type request struct {
	Op      string   `json:"op"`
	AOR     string   `json:"aor,omitempty"`
	Contact string   `json:"contact,omitempty"`
	Binding *Binding `json:"binding,omitempty"`
	Now     int64    `json:"now,omitempty"` // unix nanoseconds, for expire
}

type response struct {
	Bindings []Binding `json:"bindings,omitempty"`
	N        int       `json:"n,omitempty"`
	Err      string    `json:"err,omitempty"`
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
	b, err := json.Marshal(q)
	if err != nil {
		return response{}, fmt.Errorf("location %s: %w", q.Op, err)
	}
	out, err := r.call(append([]byte{RequestTag}, b...))
	if err != nil {
		return response{}, fmt.Errorf("location %s: %w", q.Op, err)
	}
	var resp response
	if err := json.Unmarshal(out, &resp); err != nil {
		return response{}, fmt.Errorf("location %s: bad answer: %w", q.Op, err)
	}
	if resp.Err != "" {
		return resp, fmt.Errorf("location %s: %s", q.Op, resp.Err)
	}
	return resp, nil
}

// Save implements Store.
func (r *Remote) Save(aor string, b Binding) error {
	_, err := r.do(request{Op: "save", AOR: aor, Binding: &b})
	return err
}

// Register implements Store: the save's answer carries the bindings.
func (r *Remote) Register(aor string, b Binding) ([]Binding, error) {
	resp, err := r.do(request{Op: "register", AOR: aor, Binding: &b})
	return resp.Bindings, err
}

// Lookup implements Store.
func (r *Remote) Lookup(aor string) ([]Binding, error) {
	resp, err := r.do(request{Op: "lookup", AOR: aor})
	return resp.Bindings, err
}

// Remove implements Store.
func (r *Remote) Remove(aor, contact string) error {
	_, err := r.do(request{Op: "remove", AOR: aor, Contact: contact})
	return err
}

// Expire implements Store; a failed call counts as nothing expired.
func (r *Remote) Expire(now time.Time) int {
	resp, _ := r.do(request{Op: "expire", Now: now.UnixNano()})
	return resp.N
}

// List implements Store; a failed call lists nothing.
func (r *Remote) List() []Binding {
	resp, _ := r.do(request{Op: "list"})
	return resp.Bindings
}

// ErrNotLocation is reported (in the answer) for a call that is not a
// location request.
var ErrNotLocation = errors.New("not a location request")

// Serve answers one request made by a Remote against store. It never fails:
// a bad request gets an answer that carries the reason.
func Serve(store Store, req []byte) []byte {
	resp := serve(store, req)
	out, err := json.Marshal(resp)
	if err != nil {
		out, _ = json.Marshal(response{Err: err.Error()})
	}
	return out
}

func serve(store Store, req []byte) response {
	if !IsRequest(req) {
		return response{Err: ErrNotLocation.Error()}
	}
	var q request
	if err := json.Unmarshal(req[1:], &q); err != nil {
		return response{Err: "bad request: " + err.Error()}
	}
	var err error
	var resp response
	switch q.Op {
	case "save":
		if q.Binding == nil {
			return response{Err: "save without a binding"}
		}
		err = store.Save(q.AOR, *q.Binding)
	case "register":
		if q.Binding == nil {
			return response{Err: "register without a binding"}
		}
		resp.Bindings, err = store.Register(q.AOR, *q.Binding)
	case "lookup":
		resp.Bindings, err = store.Lookup(q.AOR)
	case "remove":
		err = store.Remove(q.AOR, q.Contact)
	case "expire":
		resp.N = store.Expire(time.Unix(0, q.Now))
	case "list":
		resp.Bindings = store.List()
	default:
		return response{Err: fmt.Sprintf("unknown operation %q", q.Op)}
	}
	if err != nil {
		resp.Err = err.Error()
	}
	return resp
}
