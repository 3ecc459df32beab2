package loadgen

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

const sippPath = "/usr/bin/sipp"

func needSipp(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(sippPath); err != nil {
		t.Skipf("SIPp is not installed at %s (Debian package sip-tester); interoperability not tested", sippPath)
	}
}

// sippStats reads the cumulative counters from the last line of SIPp's
// -trace_stat file.
func sippStats(t *testing.T, name string) map[string]int64 {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatalf("sipp stat file: %v", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comma = ';'
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("sipp stat file: want a header and rows, have %d records, %v", len(recs), err)
	}
	out := map[string]int64{}
	last := recs[len(recs)-1]
	for i, h := range recs[0] {
		if i < len(last) {
			if v, err := strconv.ParseInt(last[i], 10, 64); err == nil {
				out[h] = v
			}
		}
	}
	return out
}

type sippRun struct {
	done chan error
	stf  string
	out  *os.File
}

func startSipp(t *testing.T, args ...string) *sippRun {
	t.Helper()
	dir := t.TempDir()
	s := &sippRun{done: make(chan error, 1), stf: filepath.Join(dir, "stat.csv")}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if !slices.Contains(args, "-p") {
		// SIPp's own default is 5060 when it is free, which the quick
		// start's test (e2e/lifecycle) needs to itself.
		args = append(args, "-p", strconv.Itoa(testkit.FreePort(t)))
	}
	args = append(args, "-trace_stat", "-stf", s.stf, "-fd", "1", "-buff_size", "4194304", "-nostdin", "-timeout", "40")
	cmd := exec.CommandContext(ctx, sippPath, args...)
	cmd.Dir = dir
	out, err := os.Create(filepath.Join(dir, "screen.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s.out = out
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sipp: %v", err)
	}
	go func() { s.done <- cmd.Wait() }()
	return s
}

func (s *sippRun) wait(t *testing.T) map[string]int64 {
	t.Helper()
	select {
	case err := <-s.done:
		// SIPp exits 1 when a call failed; the counts below say which.
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
			b, _ := os.ReadFile(s.out.Name())
			t.Fatalf("sipp: %v\n%s", err, tail(b))
		}
	case <-time.After(70 * time.Second):
		t.Fatal("sipp did not exit within 70s")
	}
	return sippStats(t, s.stf)
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func TestSiploadUACAgainstSippUAS(t *testing.T) {
	t.Parallel()
	needSipp(t)
	for _, tp := range []string{"u1", "t1"} {
		t.Run(tp, func(t *testing.T) {
			network := map[string]string{"u1": "udp", "t1": "tcp"}[tp]
			port := testkit.FreePort(t)
			sp := startSipp(t, "-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-t", tp, "-m", "20")
			testkit.WaitListening(t, network, port, 10*time.Second)
			c, err := Run(context.Background(), Options{Scenario: "uac", Target: fmt.Sprintf("127.0.0.1:%d", port), LocalIP: "127.0.0.1",
				Transport: tp, Schedule: Constant(50), MaxCalls: 20, Hold: 20 * time.Millisecond, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatalf("sipload uac: %v", err)
			}
			s := sp.wait(t)
			t.Logf("sipp uas: %d incoming, %d successful, %d failed (tcp closed %d, unexpected %d); sipload uac: %+v", s["IncomingCall(C)"], s["SuccessfulCall(C)"], s["FailedCall(C)"], s["FailedTcpClosed(C)"], s["FailedUnexpectedMessage(C)"], c.Counts)
			for _, tc := range []struct {
				name       string
				want, have int64
			}{
				{"calls placed (SIPp IncomingCall)", s["IncomingCall(C)"], c.Offered},
				{"succeeded (SIPp SuccessfulCall)", s["SuccessfulCall(C)"], c.Succeeded},
				{"failed (SIPp FailedCall)", s["FailedCall(C)"], c.Failed},
				{"succeeded", 20, c.Succeeded},
			} {
				if tc.want != tc.have {
					t.Errorf("%s: want %v, have %v", tc.name, tc.want, tc.have)
				}
			}
		})
	}
}

func TestSippUACAgainstSiploadUAS(t *testing.T) {
	t.Parallel()
	needSipp(t)
	for _, tp := range []string{"u1", "t1"} {
		t.Run(tp, func(t *testing.T) {
			// Every 5th call is refused, so the failure counts are compared too.
			addr, res := startUAS(t, Options{Transport: tp, MaxCalls: 20, RejectEvery: 5})
			sp := startSipp(t, addr.String(), "-sn", "uac", "-i", "127.0.0.1", "-t", tp, "-r", "50", "-m", "20", "-d", "20")
			s := sp.wait(t)
			u := wait(t, res, "uas")
			for _, tc := range []struct {
				name       string
				want, have int64
			}{
				{"calls received (SIPp OutgoingCall)", s["OutgoingCall(C)"], u.Offered},
				{"succeeded (SIPp SuccessfulCall)", s["SuccessfulCall(C)"], u.Succeeded},
				{"failed (SIPp FailedCall)", s["FailedCall(C)"], u.Failed},
				{"succeeded", 16, u.Succeeded},
				{"refused with 503", 4, u.Failed503RetryAfter},
			} {
				if tc.want != tc.have {
					t.Errorf("%s: want %v, have %v", tc.name, tc.want, tc.have)
				}
			}
		})
	}
}
