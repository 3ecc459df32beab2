package engine

import (
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"

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

func newRegDriver(tb testing.TB) *regDriver {
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
	d.w, err = NewWorker(Options{Script: c.Script, Sockets: []net.PacketConn{socks[0]}, Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	return d
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
	d := newRegDriver(b)
	defer d.close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		d.w.HandleMessage(&worker.Message{Socket: 0, From: d.ua, Data: d.register("r"+strconv.Itoa(i), 3600)})
	}
	b.StopTimer()
	if d.w.Stats.StoreErrors != 0 || d.w.Stats.Malformed != 0 {
		b.Fatalf("stats: want no store errors, have %+v", d.w.Stats)
	}
	if bs, err := d.store.List(); err != nil || len(bs) != i {
		b.Fatalf("bindings: want %d, have %d, %v", i, len(bs), err)
	}
}
