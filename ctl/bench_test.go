package ctl

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func BenchmarkParamsSet(b *testing.B) {
	p := newTestBackend().Params()
	vals := []string{"90", "91"}
	for i := 0; b.Loop(); i++ {
		if err := p.Set(memHigh, vals[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParamsGetSubtree(b *testing.B) {
	p := newTestBackend().Params()
	for b.Loop() {
		if _, err := p.Get("suspend_watermarks"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPSet is one `ctl set` over loopback HTTP with a token, the
// cost a script polling or tuning the server pays per call.
func BenchmarkHTTPSet(b *testing.B) {
	mux := http.NewServeMux()
	mux.Handle("/mi/", Handler(newTestBackend(), "tok"))
	srv := httptestServer(b, mux)
	c := &http.Client{}
	for i := 0; b.Loop(); i++ {
		req, _ := http.NewRequest("POST", srv+"/mi/set/"+memHigh, strings.NewReader([]string{"90", "91"}[i%2]))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("want 200, have %v", resp.StatusCode)
		}
	}
}
