package engine

import (
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/worker"
)

// registrarScript is bench/sipvisor.cfg's route for a REGISTER.
const registrarScript = `route {
	if (!mf_process_maxfwd_header(10)) {
		sl_send_reply(483, "Too Many Hops");
		exit;
	}
	t_check_trans();
	if (is_method("REGISTER")) {
		save("location");
		exit;
	}
}
`

// regDriver hands REGISTERs to a Worker whose registrations live in an
// SQLite file, as a worker's loop would. The client is a real UDP socket
// that nobody reads.
type regDriver struct {
	w     *Worker
	store location.Store
	pa    netip.AddrPort
	ua    netip.AddrPort
	close func()
}

func newRegDriver(tb testing.TB, groupCommit bool) *regDriver {
	var socks []*net.UDPConn
	for range 2 {
		s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			tb.Fatal(err)
		}
		socks = append(socks, s)
	}
	st, err := location.Open(location.Spec{Kind: location.KindSQLite, Path: filepath.Join(tb.TempDir(), "location.db")})
	if err != nil {
		tb.Fatal(err)
	}
	d := &regDriver{store: st, close: func() {
		st.Close()
		for _, s := range socks {
			s.Close()
		}
	}}
	d.pa = socks[0].LocalAddr().(*net.UDPAddr).AddrPort()
	d.ua = socks[1].LocalAddr().(*net.UDPAddr).AddrPort()
	c, err := config.Load("bench.cfg", []byte(registrarScript))
	if err != nil {
		tb.Fatal(err)
	}
	d.w, err = NewWorker(Options{Script: c.Script, Sockets: []net.PacketConn{socks[0]}, Store: st, GroupCommit: groupCommit})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// cpuTime is this process's user and system CPU so far: on a shared
// machine the benchmark's wall time says more of the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// register is bench/register.xml's REGISTER for user.
func (d *regDriver) register(user string, expires int) []byte {
	pa, ua := d.pa.String(), d.ua.String()
	return crlf("REGISTER sip:" + pa + ` SIP/2.0
Via: SIP/2.0/UDP ` + ua + `;branch=z9hG4bK-` + user + `
Max-Forwards: 70
From: <sip:` + user + "@" + pa + `>;tag=t` + user + `
To: <sip:` + user + "@" + pa + `>
Call-ID: c` + user + `@bench
CSeq: 1 REGISTER
Contact: <sip:` + user + "@" + ua + `>
Expires: ` + strconv.Itoa(expires) + `
User-Agent: SIPp register benchmark
Content-Length: 0

`)
}

// BenchmarkRegister measures one REGISTER of a new AOR through the handler
// with bench/sipvisor.cfg's script, into an SQLite store: parse, script,
// the store's write and the 200 OK sent. Allocations are per REGISTER.
func BenchmarkRegister(b *testing.B) {
	d := newRegDriver(b, false)
	defer d.close()
	b.ReportAllocs()
	i := 0
	cpu0 := cpuTime()
	for b.Loop() {
		i++
		d.w.HandleMessage(&worker.Message{Socket: 0, From: d.ua, Data: d.register("r"+strconv.Itoa(i), 3600)})
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
	b.StopTimer()
	if d.w.Stats.StoreErrors != 0 || d.w.Stats.Malformed != 0 {
		b.Fatalf("stats: want no store errors, have %+v", d.w.Stats)
	}
	if bs, err := d.store.List(); err != nil || len(bs) != i {
		b.Fatalf("bindings: want %d, have %d, %v", i, len(bs), err)
	}
}

// BenchmarkRegisterTurn is BenchmarkRegister with group commit: n
// REGISTERs arrive in one turn of the loop, which ends with their writes in
// one transaction. Time and allocations are per REGISTER.
func BenchmarkRegisterTurn(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			d := newRegDriver(b, true)
			defer d.close()
			b.ReportAllocs()
			i := 0
			cpu0 := cpuTime()
			for b.Loop() {
				i++
				d.w.HandleMessage(&worker.Message{Socket: 0, From: d.ua, Data: d.register("r"+strconv.Itoa(i), 3600)})
				if i%n == 0 {
					d.w.EndTurn()
				}
			}
			d.w.EndTurn()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(i), "cpu-ns/op")
			b.StopTimer()
			if d.w.Stats.StoreErrors != 0 {
				b.Fatalf("stats: want no store errors, have %+v", d.w.Stats)
			}
			if bs, err := d.store.List(); err != nil || len(bs) != i {
				b.Fatalf("bindings: want %d, have %d, %v", i, len(bs), err)
			}
		})
	}
}
