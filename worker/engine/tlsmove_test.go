package engine

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/ticketkey"
)

func testServerTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, pool
}

// A TLS 1.3 connection accepted by crypto/tls goes on, with the state a
// move passes, in movedTLS, and from one movedTLS in another: the client,
// crypto/tls throughout, sees one connection, messages of any size both
// ways, and its close_notify ends the last reader.
func TestTLSMoveKeepsTheConnection(t *testing.T) {
	for _, suite := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384} {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) { tlsMove(t, suite) })
	}
}

func tlsMove(t *testing.T, suite uint16) {
	base, pool := testServerTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type side struct {
		raw net.Conn
		rec *recordConn
		srv *tls.Conn
		err error
	}
	accepted := make(chan side, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- side{err: err}
			return
		}
		rec := &recordConn{Conn: c}
		srv := tls.Server(rec, serverTLSConfig(base, rec))
		err = srv.Handshake()
		if err == nil {
			rec.handshakeDone()
		}
		accepted <- side{raw: c, rec: rec, srv: srv, err: err}
	}()
	// A client that keeps sessions: the server sends it a ticket, under
	// the secret the move passes on.
	clientConf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	cli, err := tls.Dial("tcp", ln.Addr().String(), clientConf)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sd := <-accepted
	if sd.err != nil {
		t.Fatal(sd.err)
	}
	raw, rec, srv := sd.raw, sd.rec, sd.srv
	defer raw.Close()
	cs := srv.ConnectionState()
	if cs.Version != tls.VersionTLS13 {
		t.Fatalf("want TLS 1.3, have %x", cs.Version)
	}
	if _, _, err := suiteParams(cs.CipherSuite); err != nil {
		t.Skipf("this machine's crypto/tls chose %s", tls.CipherSuiteName(cs.CipherSuite))
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 3000) // three records
	exchange := func(r io.Reader, w io.Writer, what string, msg []byte) {
		t.Helper()
		go cli.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%s: client → server: %v", what, err)
		}
		if _, err := w.Write(msg); err != nil {
			t.Fatalf("%s: server → client: %v", what, err)
		}
		back := make([]byte, len(msg))
		cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(cli, back); err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("%s: the client read back: %v", what, err)
		}
	}
	exchange(srv, srv, "crypto/tls", []byte("OPTIONS sip:a SIP/2.0\r\n\r\n"))
	exchange(srv, srv, "crypto/tls, large", big)

	rs, seq, ok := rec.readState()
	if !ok {
		t.Fatal("between messages: want the read state")
	}
	wrote := rec.wrote.Load() - rec.hsWrites
	if want := uint64(1 + 3); wrote != want {
		t.Fatalf("records written since the handshake: want %d, have %d", want, wrote)
	}
	if n := rec.tickets.Load(); n != 1 || rec.ticketLarge.Load() {
		t.Fatalf("want one session ticket sent and counted, have %d (large %v)", n, rec.ticketLarge.Load())
	}
	st := &tlsMoveState{suite: cs.CipherSuite, readSecret: rec.clientApp, writeSecret: rec.serverApp, readSeq: seq, writeSeq: rec.tickets.Load() + wrote, raw: rs}
	st2, err := parseTLSMoveState(st.marshal())
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMovedTLS(raw, st2)
	if err != nil {
		t.Fatal(err)
	}
	exchange(m, m, "moved", []byte("BYE sip:a SIP/2.0\r\n\r\n"))
	exchange(m, m, "moved, large", big)

	// Moved again.
	st3, plain, err := m.moveState()
	if err != nil || len(plain) != 0 {
		t.Fatalf("the moved connection's state: %v, %d bytes of plaintext", err, len(plain))
	}
	m2, err := newMovedTLS(raw, st3)
	if err != nil {
		t.Fatal(err)
	}
	exchange(m2, m2, "moved twice", []byte("INFO sip:a SIP/2.0\r\n\r\n"))
	cli.Close()
	m2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := m2.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("after the client's close_notify: want EOF, have %v", err)
	}
}

// A state that does not hold (another suite, cut short) is refused, not
// used.
func TestTLSMoveStateRefused(t *testing.T) {
	st := &tlsMoveState{suite: tls.TLS_CHACHA20_POLY1305_SHA256, readSecret: make([]byte, 32), writeSecret: make([]byte, 32)}
	if _, err := parseTLSMoveState(st.marshal()); err == nil {
		t.Error("a ChaCha20 state: want refused")
	}
	st.suite = tls.TLS_AES_128_GCM_SHA256
	b := st.marshal()
	for i := 0; i < 2+8+8+1+32; i++ {
		if _, err := parseTLSMoveState(b[:i]); err == nil {
			t.Errorf("a state cut at %d bytes: want refused", i)
		}
	}
}

// A session begun on one worker resumes on another given the same ticket
// keys (a copy of the supervisor's, stepped on by each), and not on one
// of another supervisor's; the connection that resumed is one a move takes
// as well.
func TestTLSResumesOnAnotherWorker(t *testing.T) {
	base, pool := testServerTLS(t)
	now := time.Now()
	keeper, err := ticketkey.NewKeeper(now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ticketkey.NewKeeper(now)
	if err != nil {
		t.Fatal(err)
	}
	// worker is a tls: socket's configuration as a worker spawned with
	// enc sets it (Worker.serverTLS).
	worker := func(enc []byte) *tls.Config {
		var r ticketkey.Ratchet
		if err := r.UnmarshalBinary(enc); err != nil {
			t.Fatal(err)
		}
		r.Advance(time.Now())
		c := base.Clone()
		c.SetSessionTicketKeys(r.Keys())
		return c
	}
	a, b, c := worker(keeper.At(now)), worker(keeper.At(now)), worker(other.At(now))
	clientConf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	// dial makes one connection to a server with conf, exchanges a message
	// (the client takes its ticket as it reads), and says whether it
	// resumed, as each side saw it.
	dial := func(conf *tls.Config) (client, server bool) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type result struct {
			resumed bool
			rec     *recordConn
			err     error
		}
		done := make(chan result, 1)
		go func() {
			raw, err := ln.Accept()
			if err != nil {
				done <- result{err: err}
				return
			}
			defer raw.Close()
			rec := &recordConn{Conn: raw}
			srv := tls.Server(rec, serverTLSConfig(conf, rec))
			srv.SetDeadline(time.Now().Add(10 * time.Second))
			if err := srv.Handshake(); err != nil {
				done <- result{err: err}
				return
			}
			rec.handshakeDone()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(srv, buf); err != nil {
				done <- result{err: err}
				return
			}
			_, err = srv.Write(buf)
			done <- result{resumed: srv.ConnectionState().DidResume, rec: rec, err: err}
		}()
		cli, err := tls.Dial("tcp", ln.Addr().String(), clientConf)
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		cli.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := cli.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(cli, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.rec.tickets.Load() != 1 {
			t.Errorf("want one ticket sent on each connection, have %d", r.rec.tickets.Load())
		}
		return cli.ConnectionState().DidResume, r.resumed
	}
	if cr, sr := dial(a); cr || sr {
		t.Fatalf("the first connection: want a full handshake, have resumed (client %v, server %v)", cr, sr)
	}
	if cr, sr := dial(b); !cr || !sr {
		t.Errorf("on another worker of the same supervisor: want resumed, have client %v, server %v", cr, sr)
	}
	if cr, sr := dial(c); cr || sr {
		t.Errorf("on a worker of another supervisor: want a full handshake, have resumed (client %v, server %v)", cr, sr)
	}
	// c's ticket is now the client's: a's worker does not know it either.
	if cr, _ := dial(a); cr {
		t.Error("a ticket of another supervisor's resumed")
	}
}

// sizedMessage is a MESSAGE request of n bytes on the wire, which the
// built-in script refuses statelessly (403, a relay for strangers).
func sizedMessage(t *testing.T, via, callID string, n int) []byte {
	t.Helper()
	r := testkit.Request{Method: "MESSAGE", URI: "sip:bob@192.0.2.1", To: "<sip:bob@192.0.2.1>", Transport: "TLS",
		Via: via, CallID: callID, Headers: []string{"Content-Type: text/plain"}}
	for pad := n - len(r.String()); pad != 0; pad = n - len(r.String()) {
		if len(r.Body)+pad < 0 {
			t.Fatalf("a MESSAGE of %d bytes: too short", n)
		}
		r.Body = strings.Repeat("x", len(r.Body)+pad)
	}
	return r.Bytes()
}

// drainingProxy is a proxy whose HandOff passes what a draining worker
// gives back on handoffs.
type handed struct{ prefix, state []byte }

func drainingProxy(t *testing.T) (*proxy, chan handed) {
	handoffs := make(chan handed, 4)
	p := startProxy(t, config.DefaultText, func(o *Options) {
		o.HandOff = func(_ string, prefix, state []byte) {
			handoffs <- handed{bytes.Clone(prefix), bytes.Clone(state)}
		}
	})
	return p, handoffs
}

// tlsClient connects a TLS 1.3 client to a tls: socket of p, handing the
// worker its end as the supervisor does; file is the supervisor's copy of
// the descriptor, which the next worker reads. It skips the test where
// crypto/tls chose a suite that cannot move.
func tlsClient(t *testing.T, p *proxy) (cli *tls.Conn, file *os.File) {
	t.Helper()
	base, pool := testServerTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Records as large as the writes, as a client that flushes batches of
	// messages sends them once it has sent enough.
	clientConf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", DynamicRecordSizingDisabled: true}
	dialed := make(chan *tls.Conn, 1)
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), clientConf)
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if file, err = server.(*net.TCPConn).File(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { file.Close() })
	p.do(func() {
		p.w.tlsListen = append(p.w.tlsListen, addrPortOf(server.LocalAddr()))
		p.w.tlsServer = base
		p.w.HandleConn(server)
	})
	if cli = <-dialed; cli == nil {
		t.FailNow()
	}
	t.Cleanup(func() { cli.Close() })
	if cs := cli.ConnectionState(); cs.Version != tls.VersionTLS13 {
		t.Fatalf("want TLS 1.3, have %x", cs.Version)
	} else if _, _, err := suiteParams(cs.CipherSuite); err != nil {
		t.Skipf("this machine's crypto/tls chose %s", tls.CipherSuiteName(cs.CipherSuite))
	}
	return cli, file
}

// awaitHandOff waits for p's connection to be handed over, and checks that
// the next worker goes on with it: the client's next message is read
// whole, and an answer reaches the client.
func awaitHandOff(t *testing.T, p *proxy, handoffs chan handed, cli *tls.Conn, responses *streamReader, file *os.File) {
	t.Helper()
	var h handed
	select {
	case h = <-handoffs:
	case <-time.After(wait):
		t.Fatal("the draining worker did not hand the TLS connection over")
	}
	if s := p.stats(); s.HandedOff != 1 {
		t.Errorf("connections handed off: want 1, have %d", s.HandedOff)
	}
	st, err := parseTLSMoveState(h.state)
	if err != nil {
		t.Fatal(err)
	}
	next, err := net.FileConn(file)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	m, err := newMovedTLS(next, st)
	if err != nil {
		t.Fatal(err)
	}
	var moved net.Conn = m
	if len(h.prefix) > 0 {
		moved = &prefixed{Conn: m, pre: bytes.NewReader(h.prefix)}
	}
	d := sizedMessage(t, cli.LocalAddr().String(), "next@test", 1000)
	if _, err := cli.Write(d); err != nil {
		t.Fatal(err)
	}
	moved.SetReadDeadline(time.Now().Add(wait))
	got, err := readStreamMessage(bufio.NewReader(moved))
	if err != nil || !bytes.Equal(got, d) {
		t.Fatalf("the next worker reading the client's next message: %v\n%q", err, got)
	}
	if _, err := moved.Write([]byte("SIP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if res, ok := responses.next(t).(*sip.Response); !ok || res.StatusCode != 200 {
		t.Fatalf("the client, from the next worker: want 200, have %v", res)
	}
}

// A draining worker asks a TLS connection to stop at its next message
// boundary, where the reader may have just filled its buffer from a
// record larger than it: crypto/tls may hold plaintext the reader has not
// taken, and the connection cannot move there. It moves at a later
// boundary, with nothing lost. Before, it was kept until idle, which a
// client placing calls on it never is: the worker held it to the end of
// the client's calls, or its calls were cut when the drain timed out.
func TestTLSDrainMovesAfterAFullRead(t *testing.T) {
	t.Parallel()
	p, handoffs := drainingProxy(t)
	cli, file := tlsClient(t, p)
	via := cli.LocalAddr().String()
	responses := newStreamReader(cli)
	refused := func(what string) {
		t.Helper()
		if res, ok := responses.next(t).(*sip.Response); !ok || res.StatusCode != 403 {
			t.Fatalf("%s: want 403, have %v", what, res)
		}
	}
	// The reader's buffer is 8 KB. The first record fills it exactly: a
	// whole message and the start of the next, which the reader waits to
	// complete.
	a, b, c := sizedMessage(t, via, "a@test", 4096), sizedMessage(t, via, "b@test", 6000), sizedMessage(t, via, "c@test", 4000)
	if _, err := cli.Write(append(bytes.Clone(a), b[:4096]...)); err != nil {
		t.Fatal(err)
	}
	refused("the first message")
	p.do(p.w.Drain)
	// The second record ends that message and brings a third, more than
	// the buffer has room for: the read fills it, and the boundary after
	// the second message is one where crypto/tls still holds plaintext.
	if _, err := cli.Write(append(bytes.Clone(b[4096:]), c...)); err != nil {
		t.Fatal(err)
	}
	refused("the second message")
	refused("the third message")
	awaitHandOff(t, p, handoffs, cli, responses, file)
}

// A connection the supervisor gives a worker that has begun to drain (it
// picked the worker just before, or another draining worker handed it on)
// is handed over as those the worker had: before, Drain had passed, and
// the worker kept it until idle.
func TestTLSConnTakenWhileDrainingMoves(t *testing.T) {
	t.Parallel()
	p, handoffs := drainingProxy(t)
	p.do(p.w.Drain)
	cli, file := tlsClient(t, p)
	awaitHandOff(t, p, handoffs, cli, newStreamReader(cli), file)
}
