package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/internal/wire"
)

// "sipvisor worker" typed by hand, without the cookie its supervisor
// sets, ends with one sentence and exit 2 rather than waiting on
// descriptors it was never given.
func TestWorkerByHand(t *testing.T) {
	t.Parallel()
	if os.Getenv(wire.EnvCookie) != "" {
		t.Skipf("%s is set in the test's environment", wire.EnvCookie)
	}
	var e bytes.Buffer
	if code := runWorker(context.Background(), &e); code != 2 || !strings.Contains(e.String(), "not by hand") || strings.Count(e.String(), "\n") != 1 {
		t.Errorf("want exit 2 and one sentence, have %d %q", code, e.String())
	}
}

// A worker logs in the format the supervisor passes it, text by default.
func TestWorkerLogFormat(t *testing.T) {
	t.Parallel()
	for format, want := range map[string]string{"json": `{"time":`, "text": "time=", "": "time="} {
		var b bytes.Buffer
		workerLogger(&b, format, "").Info("hello", "group", "udp:127.0.0.1:5060")
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("format %q: want a line starting %q, have %q", format, want, b.String())
		}
	}
}

// A worker ends each line with its supervisor's generation, as the
// supervisor does, in either format; none passed (a supervisor older
// than that), none written.
func TestWorkerLogGeneration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ format, gen, want string }{
		{"text", "3", "group=tcp worker=1 error=x generation=3\n"},
		{"json", "3", `"group":"tcp","worker":1,"error":"x","generation":3}` + "\n"},
		{"text", "", "group=tcp worker=1 error=x\n"},
	} {
		var b bytes.Buffer
		workerLogger(&b, c.format, c.gen).With("group", "tcp", "worker", 1).Warn("read", "error", "x")
		if !strings.HasSuffix(b.String(), c.want) {
			t.Errorf("format %q, generation %q: want a line ending %q, have %q", c.format, c.gen, c.want, b.String())
		}
	}
}
