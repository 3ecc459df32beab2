// Command tlsload is the TLS client of bench/tls.sh: SIPp as Debian builds
// it has no TLS, so the TLS side of the benchmark is this program.
//
// -mode handshake opens connections at -rate per second for -secs seconds,
// each a full handshake (no session is ever resumed), and closes each once
// its handshake is done. With -rate 0 it opens them as fast as -inflight
// connections at a time allow, which measures handshakes per second.
//
// -mode calls opens -conns connections and runs calls over them at -rate
// per second for -secs seconds, round robin: INVITE, 200, ACK, BYE, 200,
// the BYE sent as soon as the 200 of the INVITE arrives (SIPp's -d 0). The
// load is open loop: a call is started on time whatever the answers do.
//
// Both modes write cumulative counts to -stat every 100 ms (a CSV that
// bench/tls.sh reads at the end of its warm-up) and print a summary of
// key=value lines when they end. Only 127.0.0.1 is meant: the program
// exists to load a server under test on the same machine, for a bounded time.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tlsload:", err)
		os.Exit(1)
	}
}

type options struct {
	mode     string
	addr     string
	ca       string
	rate     int
	secs     float64
	inflight int
	conns    int
	uas      string
	stat     string
	version  uint16
	curve    tls.CurveID
	group    string // the -curve flag, as the summary names it
	timeout  time.Duration
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("tlsload", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.mode, "mode", "handshake", "handshake or calls")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:5061", "the server's TLS socket")
	fs.StringVar(&o.ca, "ca", "", "PEM file of the certificate the server's is checked against (required)")
	fs.IntVar(&o.rate, "rate", 100, "handshakes or calls started per second; 0 with -mode handshake: as fast as -inflight allows")
	fs.Float64Var(&o.secs, "secs", 10, "seconds to start handshakes or calls for")
	fs.IntVar(&o.inflight, "inflight", 64, "most handshakes under way at once; a handshake due past it is counted failed")
	fs.IntVar(&o.conns, "conns", 2, "connections the calls share (-mode calls)")
	fs.StringVar(&o.uas, "uas", "", "host:port of the UDP callee, put in the Request-URI (-mode calls)")
	fs.StringVar(&o.stat, "stat", "", "CSV file of cumulative counts, a row every 100 ms")
	tlsVersion := fs.String("tls", "1.3", "TLS version offered: 1.2 or 1.3")
	curve := fs.String("curve", "x25519", "key exchange group offered: x25519 or p256 (one only, so that both servers use the same)")
	fs.DurationVar(&o.timeout, "timeout", 32*time.Second, "a handshake or call not done in this long fails (timer B)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch *tlsVersion {
	case "1.2":
		o.version = tls.VersionTLS12
	case "1.3":
		o.version = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("-tls %q: want 1.2 or 1.3", *tlsVersion)
	}
	o.group = *curve
	switch *curve {
	case "x25519":
		o.curve = tls.X25519
	case "p256":
		o.curve = tls.CurveP256
	default:
		return nil, fmt.Errorf("-curve %q: want x25519 or p256", *curve)
	}
	switch {
	case o.mode != "handshake" && o.mode != "calls":
		return nil, fmt.Errorf("-mode %q: want handshake or calls", o.mode)
	case o.ca == "":
		return nil, errors.New("-ca is required: the server's certificate is checked, as a client would")
	case o.rate < 0 || (o.rate == 0 && o.mode == "calls"):
		return nil, fmt.Errorf("-rate %d: want a positive number (0 only with -mode handshake)", o.rate)
	case o.secs <= 0 || o.secs > 3600:
		return nil, fmt.Errorf("-secs %g: want more than 0 and at most 3600", o.secs)
	case o.inflight < 1:
		return nil, fmt.Errorf("-inflight %d: want at least 1", o.inflight)
	case o.conns < 1 || o.conns > 1000:
		return nil, fmt.Errorf("-conns %d: want 1 to 1000", o.conns)
	case o.mode == "calls" && o.uas == "":
		return nil, errors.New("-mode calls needs -uas, the callee's host:port")
	case o.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: want more than 0", o.timeout)
	}
	return o, nil
}

func (o *options) tlsConfig() (*tls.Config, error) {
	b, err := os.ReadFile(o.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", o.ca)
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return nil, fmt.Errorf("-addr %q: %w", o.addr, err)
	}
	// No ClientSessionCache: every handshake is a full one. One group
	// only: Go would otherwise offer a post-quantum hybrid first, which
	// Kamailio's OpenSSL 3.0 does not have and sipvisor's Go does, and the
	// two servers would do different work.
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: o.version, MaxVersion: o.version,
		CurvePreferences: []tls.CurveID{o.curve}}, nil
}

// counts are what the stat file and the summary report.
type counts struct {
	started, successful, failed, resumed atomic.Int64
}

// statWriter appends a row of cumulative counts every 100 ms until stop
// is closed, and one more at the end.
func statWriter(path string, c *counts, start time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if path == "" {
		<-stop
		return
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsload:", err)
		<-stop
		return
	}
	defer f.Close()
	fmt.Fprintln(f, "elapsed_s,started,successful,failed")
	row := func() {
		fmt.Fprintf(f, "%.1f,%d,%d,%d\n", time.Since(start).Seconds(), c.started.Load(), c.successful.Load(), c.failed.Load())
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			row()
		case <-stop:
			row()
			return
		}
	}
}

// pace calls start(i) for i = 0, 1, ... at rate per second for d, on
// time on average (a late tick starts every start that is due), until
// ctx ends.
func pace(ctx context.Context, rate int, d time.Duration, start func(i int64)) {
	begin := time.Now()
	total := int64(float64(rate) * d.Seconds())
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var n int64
	for n < total {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := min(int64(now.Sub(begin).Seconds()*float64(rate))+1, total)
			for ; n < due; n++ {
				start(n)
			}
		}
	}
}

func run(args []string, out io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	conf, err := o.tlsConfig()
	if err != nil {
		return err
	}
	// SIGTERM or SIGINT ends the load early; the summary is still printed.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	var c counts
	start := time.Now()
	stop, done := make(chan struct{}), make(chan struct{})
	go statWriter(o.stat, &c, start, stop, done)
	var lat []time.Duration
	var extra []string
	if o.mode == "handshake" {
		lat, extra = handshakes(ctx, o, conf, &c)
	} else {
		lat, extra, err = calls(ctx, o, conf, &c)
	}
	elapsed := time.Since(start)
	close(stop)
	<-done
	if err != nil {
		return err
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Fprintf(out, "mode=%s\nstarted=%d\nsuccessful=%d\nfailed=%d\nresumed=%d\nelapsed_s=%.2f\nrate_per_s=%.1f\n",
		o.mode, c.started.Load(), c.successful.Load(), c.failed.Load(), c.resumed.Load(),
		elapsed.Seconds(), float64(c.successful.Load())/elapsed.Seconds())
	p50, p99 := percentile(lat, 50), percentile(lat, 99)
	fmt.Fprintf(out, "p50_ms=%.2f\np99_ms=%.2f\nclient_cpu_s=%.2f\n", ms(p50), ms(p99), cpu.Seconds())
	for _, e := range extra {
		fmt.Fprintln(out, e)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the p-th (0-100) of ds, nearest rank; 0 with none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// handshakes opens connections, each a full handshake, and closes them.
func handshakes(ctx context.Context, o *options, conf *tls.Config, c *counts) ([]time.Duration, []string) {
	var mu sync.Mutex
	var lat []time.Duration
	var state tls.ConnectionState
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, o.inflight)
	one := func() {
		defer wg.Done()
		defer func() { <-sem }()
		t0 := time.Now()
		hctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		d := tls.Dialer{NetDialer: &net.Dialer{}, Config: conf}
		nc, err := d.DialContext(hctx, "tcp", o.addr)
		if err != nil {
			c.failed.Add(1)
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			return
		}
		took := time.Since(t0)
		tc := nc.(*tls.Conn)
		st := tc.ConnectionState()
		if st.DidResume {
			c.resumed.Add(1)
		}
		// Close sends close_notify; the server closes its end on reading it.
		tc.Close()
		c.successful.Add(1)
		mu.Lock()
		lat = append(lat, took)
		state = st
		mu.Unlock()
	}
	if o.rate == 0 {
		// As fast as -inflight at a time allows, until -secs.
		dctx, cancel := context.WithTimeout(ctx, time.Duration(o.secs*float64(time.Second)))
		defer cancel()
	loop:
		for {
			select {
			case <-dctx.Done():
				break loop
			case sem <- struct{}{}:
				c.started.Add(1)
				wg.Add(1)
				go one()
			}
		}
	} else {
		pace(ctx, o.rate, time.Duration(o.secs*float64(time.Second)), func(int64) {
			c.started.Add(1)
			select {
			case sem <- struct{}{}:
				wg.Add(1)
				go one()
			default:
				c.failed.Add(1) // open loop: too many under way is a failure
			}
		})
	}
	wg.Wait()
	extra := []string{"version=" + tls.VersionName(state.Version), "cipher=" + tls.CipherSuiteName(state.CipherSuite),
		"group=" + o.group}
	if firstErr != nil {
		extra = append(extra, "first_error="+strings.ReplaceAll(firstErr.Error(), "\n", " "))
	}
	return lat, extra
}

// call is one call's state, kept by Call-ID until its BYE is answered.
type call struct {
	id, tag string
	conn    *sipConn
	start   time.Time
	invited bool // the INVITE's 200 has come and the BYE is sent
}

type sipConn struct {
	tc    *tls.Conn
	local string // host:port, for Via and Contact
	wmu   sync.Mutex
}

func (s *sipConn) send(msg string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.tc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := io.WriteString(s.tc, msg)
	return err
}

// callRun holds the calls in progress.
type callRun struct {
	o      *options
	c      *counts
	prefix string
	branch atomic.Int64
	mu     sync.Mutex
	live   map[string]*call
	setup  []time.Duration // INVITE to its 200
	errs   map[string]int64
}

func (r *callRun) fail(id, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[id]; !ok {
		return
	}
	delete(r.live, id)
	r.errs[why]++
	r.c.failed.Add(1)
}

func (r *callRun) newBranch() string {
	return fmt.Sprintf("z9hG4bK-%s-%d", r.prefix, r.branch.Add(1))
}

func calls(ctx context.Context, o *options, conf *tls.Config, c *counts) ([]time.Duration, []string, error) {
	var nonce [4]byte
	rand.Read(nonce[:])
	r := &callRun{o: o, c: c, prefix: hex.EncodeToString(nonce[:]), live: map[string]*call{}, errs: map[string]int64{}}
	conns := make([]*sipConn, o.conns)
	var state tls.ConnectionState
	for i := range conns {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d := tls.Dialer{NetDialer: &net.Dialer{}, Config: conf}
		nc, err := d.DialContext(hctx, "tcp", o.addr)
		cancel()
		if err != nil {
			for _, s := range conns[:i] {
				s.tc.Close()
			}
			return nil, nil, fmt.Errorf("connection %d to %s: %w", i+1, o.addr, err)
		}
		tc := nc.(*tls.Conn)
		state = tc.ConnectionState()
		conns[i] = &sipConn{tc: tc, local: tc.LocalAddr().String()}
	}
	var readers sync.WaitGroup
	for _, s := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r.read(s)
		}()
	}
	// Calls past their timeout fail, as timer B would fail them.
	sweepDone := make(chan struct{})
	sweepStop := make(chan struct{})
	go func() {
		defer close(sweepDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sweepStop:
				return
			case now := <-t.C:
				var late []string
				r.mu.Lock()
				for id, cl := range r.live {
					if now.Sub(cl.start) > o.timeout {
						late = append(late, id)
					}
				}
				r.mu.Unlock()
				for _, id := range late {
					r.fail(id, "timeout")
				}
			}
		}
	}()
	pace(ctx, o.rate, time.Duration(o.secs*float64(time.Second)), func(i int64) {
		r.invite(conns[i%int64(len(conns))], i)
	})
	// Wait for the calls in progress, for at most the timeout.
	deadline := time.Now().Add(o.timeout + 2*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r.mu.Lock()
		n := len(r.live)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(sweepStop)
	<-sweepDone
	r.mu.Lock()
	for id := range r.live {
		delete(r.live, id)
		r.errs["unfinished"]++
		c.failed.Add(1)
	}
	r.mu.Unlock()
	for _, s := range conns {
		s.tc.Close()
	}
	readers.Wait()
	extra := []string{"version=" + tls.VersionName(state.Version), "cipher=" + tls.CipherSuiteName(state.CipherSuite),
		"group=" + o.group, fmt.Sprintf("conns=%d", o.conns)}
	keys := make([]string, 0, len(r.errs))
	for k := range r.errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		extra = append(extra, fmt.Sprintf("failed_%s=%d", k, r.errs[k]))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setup, extra, nil
}

// sdp is the offer SIPp's uac sends, so that INVITEs are of the usual size.
const sdp = "v=0\r\no=user1 53655765 2353687637 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"

func (r *callRun) invite(s *sipConn, n int64) {
	cl := &call{id: fmt.Sprintf("%d-%s@tlsload", n, r.prefix), tag: fmt.Sprintf("%d", n), conn: s, start: time.Now()}
	r.c.started.Add(1)
	r.mu.Lock()
	r.live[cl.id] = cl
	r.mu.Unlock()
	msg := fmt.Sprintf("INVITE sip:service@%s SIP/2.0\r\n"+
		"Via: SIP/2.0/TLS %s;branch=%s;rport\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: tlsload <sip:tlsload@%s>;tag=%s\r\n"+
		"To: <sip:service@%s>\r\n"+
		"Call-ID: %s\r\n"+
		"CSeq: 1 INVITE\r\n"+
		"Contact: <sip:tlsload@%s;transport=tls>\r\n"+
		"Subject: Performance Test\r\n"+
		"Content-Type: application/sdp\r\n"+
		"Content-Length: %d\r\n\r\n%s",
		r.o.uas, s.local, r.newBranch(), s.local, cl.tag, r.o.uas, cl.id, s.local, len(sdp), sdp)
	if err := s.send(msg); err != nil {
		r.fail(cl.id, "write")
	}
}

// read takes the responses of one connection until it closes.
func (r *callRun) read(s *sipConn) {
	br := bufio.NewReaderSize(s.tc, 64<<10)
	for {
		m, err := readMessage(br)
		if err != nil {
			return
		}
		if m.code == 0 {
			continue // a request: none is expected from the callee here
		}
		id := m.header("call-id")
		method := m.cseqMethod()
		r.mu.Lock()
		cl, ok := r.live[id]
		r.mu.Unlock()
		if !ok || m.code < 200 {
			continue
		}
		switch {
		case method == "INVITE" && m.code >= 300:
			// A final non-2xx is acknowledged hop by hop, on the branch
			// of the INVITE.
			s.send(r.ackFor(cl, m, m.topVia()))
			r.fail(id, strconv.Itoa(m.code))
		case method == "INVITE" && !cl.invited:
			r.mu.Lock()
			cl.invited = true
			r.setup = append(r.setup, time.Since(cl.start))
			r.mu.Unlock()
			ack := r.ackFor(cl, m, "")
			if err := s.send(ack + r.bye(cl, m)); err != nil {
				r.fail(id, "write")
			}
		case method == "BYE" && m.code == 200:
			r.mu.Lock()
			if _, ok := r.live[id]; ok {
				delete(r.live, id)
				r.c.successful.Add(1)
			}
			r.mu.Unlock()
		case method == "BYE":
			r.fail(id, "bye-"+strconv.Itoa(m.code))
		}
	}
}

// inDialog builds ACK or BYE from the 2xx m: to its Contact, through the
// reversed Record-Route. via, when set, is the INVITE's Via (the ACK of a
// non-2xx).
func (r *callRun) inDialog(method string, cseq int, cl *call, m *message, via string) string {
	hopByHop := via != ""
	target := "sip:service@" + r.o.uas
	if ct := uriOf(m.header("contact")); ct != "" && !hopByHop {
		target = ct
	}
	if !hopByHop {
		via = fmt.Sprintf("SIP/2.0/TLS %s;branch=%s;rport", cl.conn.local, r.newBranch())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\r\nVia: %s\r\nMax-Forwards: 70\r\n", method, target, via)
	if !hopByHop {
		rr := splitList(m.headers["record-route"])
		for i := len(rr) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "Route: %s\r\n", rr[i])
		}
	}
	fmt.Fprintf(&b, "From: tlsload <sip:tlsload@%s>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: %d %s\r\n",
		cl.conn.local, cl.tag, m.header("to"), cl.id, cseq, method)
	fmt.Fprintf(&b, "Contact: <sip:tlsload@%s;transport=tls>\r\nContent-Length: 0\r\n\r\n", cl.conn.local)
	return b.String()
}

func (r *callRun) ackFor(cl *call, m *message, via string) string {
	return r.inDialog("ACK", 1, cl, m, via)
}

func (r *callRun) bye(cl *call, m *message) string { return r.inDialog("BYE", 2, cl, m, "") }

// message is a SIP message as far as this client needs it.
type message struct {
	code    int    // 0 for a request
	first   string // the start line
	headers map[string][]string
}

func (m *message) header(name string) string {
	if v := m.headers[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m *message) cseqMethod() string {
	_, method, _ := strings.Cut(strings.TrimSpace(m.header("cseq")), " ")
	return strings.TrimSpace(method)
}

func (m *message) topVia() string {
	v := splitList(m.headers["via"])
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// compact are RFC 3261's one-letter header names (section 7.3.3).
var compact = map[string]string{"v": "via", "f": "from", "t": "to", "i": "call-id", "m": "contact",
	"l": "content-length", "c": "content-type", "k": "supported", "s": "subject", "e": "content-encoding"}

// maxMessage bounds what one message may take, so that a broken peer
// cannot make the client read without end.
const maxMessage = 64 << 10

// readMessage reads one message from a stream: CRLF keep-alives before
// it are skipped, its body is read by Content-Length and dropped.
func readMessage(br *bufio.Reader) (*message, error) {
	m := &message{headers: map[string][]string{}}
	size := 0
	var last string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size += len(line)
		if size > maxMessage {
			return nil, fmt.Errorf("message over %d bytes", maxMessage)
		}
		line = strings.TrimRight(line, "\r\n")
		if m.first == "" {
			if line == "" {
				size = 0
				continue
			}
			m.first = line
			continue
		}
		if line == "" {
			break
		}
		if (line[0] == ' ' || line[0] == '\t') && last != "" {
			v := m.headers[last]
			v[len(v)-1] = strings.TrimSpace(v[len(v)-1] + " " + strings.TrimSpace(line))
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("header line without a colon: %q", line)
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if full, ok := compact[name]; ok {
			name = full
		}
		m.headers[name] = append(m.headers[name], strings.TrimSpace(value))
		last = name
	}
	if rest, ok := strings.CutPrefix(m.first, "SIP/2.0 "); ok {
		code, _, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(code)
		if err != nil || n < 100 || n > 699 {
			return nil, fmt.Errorf("status line %q: bad code", m.first)
		}
		m.code = n
	}
	n := 0
	if cl := m.header("content-length"); cl != "" {
		var err error
		if n, err = strconv.Atoi(cl); err != nil || n < 0 || n > maxMessage {
			return nil, fmt.Errorf("Content-Length %q: want 0 to %d", cl, maxMessage)
		}
	}
	if _, err := br.Discard(n); err != nil {
		return nil, err
	}
	return m, nil
}

// splitList splits header values at the commas between their elements
// (not those inside <> or quotes).
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		depth, quoted, from := 0, false, 0
		for i := 0; i < len(v); i++ {
			switch ch := v[i]; {
			case ch == '"':
				quoted = !quoted
			case quoted:
			case ch == '<':
				depth++
			case ch == '>':
				depth--
			case ch == ',' && depth == 0:
				if e := strings.TrimSpace(v[from:i]); e != "" {
					out = append(out, e)
				}
				from = i + 1
			}
		}
		if e := strings.TrimSpace(v[from:]); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// uriOf is the URI of a name-addr (inside <>) or of an addr-spec (up to
// its parameters).
func uriOf(v string) string {
	if i := strings.IndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i:], '>'); j > 0 {
			return v[i+1 : i+j]
		}
		return ""
	}
	u, _, _ := strings.Cut(strings.TrimSpace(v), ";")
	return u
}
