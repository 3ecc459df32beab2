package engine

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// Moving a TLS connection to another worker.
//
// A TLS session lives in the process that made it, so a connection cannot
// be handed over as TCP ones are, by its descriptor alone. For TLS 1.3 with
// an AES-GCM suite (what Go and OpenSSL clients agree on where AES is in
// hardware) the record layer's whole state is two traffic secrets, the
// suite and a sequence number each way (RFC 8446 5.2, 5.3, 7.3): the
// draining worker passes those, with the descriptor, to the next one,
// which goes on reading and writing records itself (movedTLS). To know
// them exactly:
//
//   - the secrets come from the handshake's key log, per connection;
//   - recordConn sits under crypto/tls, hands it one record at a time and
//     counts the records each way. After the handshake, every encrypted
//     record the server writes is application data under the first
//     application secret, one record per 16 KB (no dynamic record sizing),
//     so the count it should have written is known and a record crypto/tls
//     wrote by itself (a KeyUpdate answer, after which the secrets are no
//     longer the first ones) stops the move. The session ticket crypto/tls
//     sends is the one record under that secret written during the
//     handshake (before the client's Finished, or after it when a client
//     certificate is asked for): sealing it through WrapSession counts it,
//     and the first application record's sequence number follows it;
//   - the move happens between messages, when crypto/tls holds no record
//     and no plaintext of its own: the bytes read past the last record,
//     and the plaintext read past the last message, go with it.
//
// A connection caught at a boundary with a record in progress, or with
// plaintext crypto/tls may still hold, moves at a later boundary. One that
// cannot move (TLS 1.2, ChaCha20, a record of its own) stays with the
// draining worker until it is idle, as before. A moved connection moves
// again the same way; a KeyUpdate is followed on it. The secrets cross
// only the supervisor's socket pairs with its workers, processes of one
// binary and user.

// tlsMoveState is what a moved TLS 1.3 connection's record layer needs.
type tlsMoveState struct {
	suite                   uint16
	readSecret, writeSecret []byte
	readSeq, writeSeq       uint64
	// raw is bytes read from the socket past the last record.
	raw []byte
}

func (s *tlsMoveState) marshal() []byte {
	b := binary.BigEndian.AppendUint16(nil, s.suite)
	b = binary.BigEndian.AppendUint64(b, s.readSeq)
	b = binary.BigEndian.AppendUint64(b, s.writeSeq)
	b = append(b, byte(len(s.readSecret)))
	b = append(b, s.readSecret...)
	b = append(b, byte(len(s.writeSecret)))
	b = append(b, s.writeSecret...)
	return append(b, s.raw...)
}

func parseTLSMoveState(b []byte) (*tlsMoveState, error) {
	bad := errors.New("tls hand-off state truncated")
	if len(b) < 2+8+8+1 {
		return nil, bad
	}
	s := &tlsMoveState{suite: binary.BigEndian.Uint16(b), readSeq: binary.BigEndian.Uint64(b[2:]), writeSeq: binary.BigEndian.Uint64(b[10:])}
	b = b[18:]
	n := int(b[0])
	if len(b) < 1+n+1 {
		return nil, bad
	}
	s.readSecret, b = bytes.Clone(b[1:1+n]), b[1+n:]
	n = int(b[0])
	if len(b) < 1+n {
		return nil, bad
	}
	s.writeSecret, s.raw = bytes.Clone(b[1:1+n]), bytes.Clone(b[1+n:])
	if _, _, err := suiteParams(s.suite); err != nil {
		return nil, err
	}
	return s, nil
}

// suiteParams are the key length and hash of the suites a move supports.
func suiteParams(suite uint16) (keyLen int, h func() hash.Hash, err error) {
	switch suite {
	case tls.TLS_AES_128_GCM_SHA256:
		return 16, sha256.New, nil
	case tls.TLS_AES_256_GCM_SHA384:
		return 32, sha512.New384, nil
	}
	return 0, nil, fmt.Errorf("cipher suite %s cannot be handed over", tls.CipherSuiteName(suite))
}

// expandLabel is HKDF-Expand-Label (RFC 8446 7.1) with an empty context.
func expandLabel(h func() hash.Hash, secret []byte, label string, n int) ([]byte, error) {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0)
	return hkdf.Expand(h, secret, string(info), n)
}

// recordKeys is one direction's record protection.
type recordKeys struct {
	suite  uint16
	secret []byte
	aead   cipher.AEAD
	iv     []byte
	seq    uint64
}

func newRecordKeys(suite uint16, secret []byte, seq uint64) (*recordKeys, error) {
	keyLen, h, err := suiteParams(suite)
	if err != nil {
		return nil, err
	}
	key, err := expandLabel(h, secret, "key", keyLen)
	if err != nil {
		return nil, err
	}
	iv, err := expandLabel(h, secret, "iv", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &recordKeys{suite: suite, secret: secret, aead: aead, iv: iv, seq: seq}, nil
}

func (k *recordKeys) nonce() []byte {
	n := bytes.Clone(k.iv)
	for i := 0; i < 8; i++ {
		n[len(n)-1-i] ^= byte(k.seq >> (8 * i))
	}
	return n
}

// update moves to the next traffic secret (RFC 8446 7.2).
func (k *recordKeys) update() error {
	_, h, _ := suiteParams(k.suite)
	next, err := expandLabel(h, k.secret, "traffic upd", h().Size())
	if err != nil {
		return err
	}
	nk, err := newRecordKeys(k.suite, next, 0)
	if err != nil {
		return err
	}
	*k = *nk
	return nil
}

const (
	recordHeaderLen  = 5
	maxPlaintext     = 16384
	maxCiphertext    = maxPlaintext + 256
	recordAlert      = 21
	recordHandshake  = 22
	recordAppData    = 23
	handshakeKeyUpd  = 24
	alertCloseNotify = 0
)

// movedTLS is a TLS 1.3 connection taken over from another worker: it
// reads and writes records with the state that worker passed.
type movedTLS struct {
	net.Conn
	rmu     sync.Mutex // the reader's
	in      *recordKeys
	raw     []byte // read, not yet a whole record
	plain   []byte // decrypted, not yet read
	hs      []byte // handshake bytes, not yet a whole message
	readErr error

	wmu sync.Mutex // writes: the loop's, and a KeyUpdate answer
	out *recordKeys
}

func newMovedTLS(c net.Conn, s *tlsMoveState) (*movedTLS, error) {
	in, err := newRecordKeys(s.suite, s.readSecret, s.readSeq)
	if err != nil {
		return nil, err
	}
	out, err := newRecordKeys(s.suite, s.writeSecret, s.writeSeq)
	if err != nil {
		return nil, err
	}
	return &movedTLS{Conn: c, in: in, out: out, raw: s.raw}, nil
}

// Read returns plaintext of at most one record per call.
func (m *movedTLS) Read(p []byte) (int, error) {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	for len(m.plain) == 0 {
		if m.readErr != nil {
			return 0, m.readErr
		}
		if err := m.readRecord(); err != nil {
			if !isTimeout(err) {
				m.readErr = err
			}
			return 0, err
		}
	}
	n := copy(p, m.plain)
	m.plain = m.plain[n:]
	return n, nil
}

// readRecord reads and opens one record; a timeout leaves what was read
// for the next call.
func (m *movedTLS) readRecord() error {
	for {
		if len(m.raw) >= recordHeaderLen {
			n := int(binary.BigEndian.Uint16(m.raw[3:5]))
			if n > maxCiphertext {
				return errors.New("tls: oversized record")
			}
			if len(m.raw) >= recordHeaderLen+n {
				rec := m.raw[:recordHeaderLen+n]
				m.raw = m.raw[recordHeaderLen+n:]
				return m.open(rec)
			}
		}
		bp := readBufs.Get().(*[]byte)
		k, err := m.Conn.Read(*bp)
		m.raw = append(m.raw, (*bp)[:k]...)
		readBufs.Put(bp)
		if err != nil {
			if err == io.EOF && len(m.raw) > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

func (m *movedTLS) open(rec []byte) error {
	if rec[0] != recordAppData {
		// Only ChangeCipherSpec comes in the clear after the handshake,
		// and only during it.
		return fmt.Errorf("tls: unexpected record type %d", rec[0])
	}
	plain, err := m.in.aead.Open(nil, m.in.nonce(), rec[recordHeaderLen:], rec[:recordHeaderLen])
	if err != nil {
		return errors.New("tls: record authentication failed")
	}
	m.in.seq++
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return errors.New("tls: record without content type")
	}
	typ, body := plain[i], plain[:i]
	switch typ {
	case recordAppData:
		m.plain = body
		return nil
	case recordAlert:
		if len(body) >= 2 && body[1] == alertCloseNotify {
			return io.EOF
		}
		return fmt.Errorf("tls: alert %d from the peer", body)
	case recordHandshake:
		m.hs = append(m.hs, body...)
		return m.handshake()
	}
	return fmt.Errorf("tls: unexpected content type %d", typ)
}

// handshake takes the post-handshake messages a server can get: a
// KeyUpdate (answered when the peer asks) and, ignored, anything else.
func (m *movedTLS) handshake() error {
	for len(m.hs) >= 4 {
		n := int(m.hs[1])<<16 | int(m.hs[2])<<8 | int(m.hs[3])
		if len(m.hs) < 4+n {
			return nil
		}
		typ, body := m.hs[0], m.hs[4:4+n]
		m.hs = m.hs[4+n:]
		if typ != handshakeKeyUpd {
			continue
		}
		if len(body) != 1 || body[0] > 1 {
			return errors.New("tls: malformed KeyUpdate")
		}
		if err := m.in.update(); err != nil {
			return err
		}
		if body[0] == 1 {
			m.wmu.Lock()
			err := m.seal(recordHandshake, []byte{handshakeKeyUpd, 0, 0, 1, 0})
			if err == nil {
				err = m.out.update()
			}
			m.wmu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// seal writes one record of typ (wmu held).
func (m *movedTLS) seal(typ byte, body []byte) error {
	plain := append(bytes.Clone(body), typ)
	hdr := []byte{recordAppData, 3, 3, 0, 0}
	binary.BigEndian.PutUint16(hdr[3:], uint16(len(plain)+m.out.aead.Overhead()))
	rec := m.out.aead.Seal(hdr, m.out.nonce(), plain, hdr)
	m.out.seq++
	_, err := m.Conn.Write(rec)
	return err
}

func (m *movedTLS) Write(p []byte) (int, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxPlaintext)]
		if err := m.seal(recordAppData, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// moveState is the state to pass on, between messages: plaintext read past
// the last message stays the caller's (with what the reader buffered).
// errMoveLater: part of a post-handshake message came, the rest will.
func (m *movedTLS) moveState() (*tlsMoveState, []byte, error) {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.readErr != nil {
		return nil, nil, m.readErr
	}
	if len(m.hs) > 0 {
		return nil, nil, errMoveLater
	}
	return &tlsMoveState{suite: m.in.suite, readSecret: m.in.secret, writeSecret: m.out.secret,
		readSeq: m.in.seq, writeSeq: m.out.seq, raw: bytes.Clone(m.raw)}, bytes.Clone(m.plain), nil
}

// recordConn sits between crypto/tls and the socket of a connection
// accepted on a tls: socket: it hands crypto/tls one record at a time,
// counts the application records each way, and keeps the handshake's
// secrets, so that the connection can be moved (see above).
type recordConn struct {
	net.Conn

	// Reads, on the reader's goroutine.
	buf      []byte  // read from the socket, not yet handed on
	bp       *[]byte // buf's buffer, from readBufs
	hdr      [recordHeaderLen]byte
	hdrGot   int
	bodyLeft int
	readRecs uint64 // encrypted records handed on whole

	// Writes: the handshake's on the reader's goroutine, then the loop's.
	whdr     []byte
	wbody    int
	wrote    atomic.Uint64 // encrypted records written
	hsReads  uint64        // readRecs when the handshake ended
	hsWrites uint64
	// tickets is the records of session tickets sent under the first
	// application secret; ticketLarge: a ticket of a size whose records
	// are not certain to be counted right, which stops a move.
	tickets     atomic.Uint64
	ticketLarge atomic.Bool

	keysMu               sync.Mutex
	clientApp, serverApp []byte
}

// readBufs are the buffers the socket of a TLS connection is read into,
// each held only while what it read is being handed on: one made per read
// was 16 KB of garbage per message, and one kept per connection would be
// 16 KB held by each idle one.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

func (r *recordConn) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		bp := readBufs.Get().(*[]byte)
		n, err := r.Conn.Read(*bp)
		if n == 0 {
			readBufs.Put(bp)
			return 0, err
		}
		r.bp, r.buf = bp, (*bp)[:n]
	}
	var n int
	if r.bodyLeft == 0 {
		n = copy(p[:min(len(p), recordHeaderLen-r.hdrGot)], r.buf)
		copy(r.hdr[r.hdrGot:], r.buf[:n])
		r.hdrGot += n
		if r.hdrGot == recordHeaderLen {
			r.hdrGot = 0
			r.bodyLeft = int(binary.BigEndian.Uint16(r.hdr[3:5]))
			if r.bodyLeft == 0 {
				r.recordDone()
			}
		}
	} else {
		n = copy(p[:min(len(p), r.bodyLeft)], r.buf)
		if r.bodyLeft -= n; r.bodyLeft == 0 {
			r.recordDone()
		}
	}
	r.buf = r.buf[n:]
	if len(r.buf) == 0 {
		r.buf = nil
		readBufs.Put(r.bp)
		r.bp = nil
	}
	return n, nil
}

func (r *recordConn) recordDone() {
	if r.hdr[0] == recordAppData {
		r.readRecs++
	}
}

func (r *recordConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	// Count the records in what was written, their headers possibly
	// split across writes.
	for b := p[:n]; len(b) > 0; {
		if r.wbody > 0 {
			k := min(r.wbody, len(b))
			r.wbody -= k
			b = b[k:]
			continue
		}
		k := min(recordHeaderLen-len(r.whdr), len(b))
		r.whdr = append(r.whdr, b[:k]...)
		b = b[k:]
		if len(r.whdr) == recordHeaderLen {
			if r.whdr[0] == recordAppData {
				r.wrote.Add(1)
			}
			r.wbody = int(binary.BigEndian.Uint16(r.whdr[3:5]))
			r.whdr = r.whdr[:0]
		}
	}
	return n, err
}

// Write as a key log (tls.Config.KeyLogWriter): takes the application
// traffic secrets of this connection's handshake.
type keyLog struct{ r *recordConn }

func (k keyLog) Write(line []byte) (int, error) {
	f := strings.Fields(string(line))
	if len(f) == 3 {
		if s, err := hex.DecodeString(f[2]); err == nil {
			k.r.keysMu.Lock()
			switch f[0] {
			case "CLIENT_TRAFFIC_SECRET_0":
				k.r.clientApp = s
			case "SERVER_TRAFFIC_SECRET_0":
				k.r.serverApp = s
			}
			k.r.keysMu.Unlock()
		}
	}
	return len(line), nil
}

// handshakeDone notes where application records start.
func (r *recordConn) handshakeDone() {
	r.hsReads = r.readRecs
	r.hsWrites = r.wrote.Load()
}

// readState is the reading half of the state to pass on, taken by the
// reader once it stopped between messages: false when crypto/tls may hold
// part of a record.
func (r *recordConn) readState() (raw []byte, seq uint64, ok bool) {
	if r.hdrGot != 0 || r.bodyLeft != 0 {
		return nil, 0, false
	}
	return bytes.Clone(r.buf), r.readRecs - r.hsReads, true
}

// serverTLSConfig is a tls: socket's configuration for one connection that
// may be moved: its own key log, its session tickets counted, records of
// 16 KB.
func serverTLSConfig(base *tls.Config, r *recordConn) *tls.Config {
	c := base.Clone()
	c.KeyLogWriter = keyLog{r}
	c.DynamicRecordSizingDisabled = true
	c.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ticket, err := c.EncryptTicket(cs, ss)
		if err != nil {
			return nil, err
		}
		// A NewSessionTicket message is 17 bytes and the ticket (RFC 8446
		// 4.6.1, with the empty nonce and no extension crypto/tls sends):
		// one record, unless it comes near a record's size (a client
		// certificate chain in it), where the connection stays put rather
		// than move on a count that may be wrong.
		if 17+len(ticket)+64 > maxPlaintext {
			r.ticketLarge.Store(true)
		}
		r.tickets.Add(1)
		return ticket, nil
	}
	return c
}
