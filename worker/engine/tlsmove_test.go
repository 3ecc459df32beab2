package engine

import (
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
	"testing"
	"time"

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
	st3, plain, ok := m.moveState()
	if !ok || len(plain) != 0 {
		t.Fatalf("the moved connection's state: ok %v, %d bytes of plaintext", ok, len(plain))
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
