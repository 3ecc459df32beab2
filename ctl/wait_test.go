package ctl

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// wait-ready waits through refused connections and 503s until /readyz says
// 200, and gives up at -timeout with the last reason.
func TestWaitReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("want /readyz asked, have %s", r.URL.Path)
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"not ready","reason":"group udp:127.0.0.1:5060 has no ready worker"}`))
			return
		}
		w.Write([]byte(`{"status":"ready"}`))
	}))
	defer srv.Close()
	code, out, errs := ctl(t, srv.URL, "wait-ready")
	if code != 0 || out != "ready\n" {
		t.Fatalf("want exit 0 and \"ready\", have %d %q %q", code, out, errs)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("want 3 polls, have %d", n)
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"status":"not ready","reason":"suspended: system memory"}`))
	}))
	defer never.Close()
	// Long enough for a first answer on a loaded machine: the reason comes
	// from an answer.
	// The flag after the command, as a script writes it.
	code, _, errs = ctl(t, never.URL, "wait-ready", "-timeout", "2s")
	if code != 1 || !strings.Contains(errs, "not ready after 2s: suspended: system memory") {
		t.Fatalf("want exit 1 naming the reason, have %d %q", code, errs)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, errs = ctl(t, addr, "-timeout", "300ms", "wait-ready")
	if code != 1 || !strings.Contains(errs, "connection refused") {
		t.Fatalf("want exit 1 with connection refused, have %d %q", code, errs)
	}
}
