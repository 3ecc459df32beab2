package loadgen

import (
	"container/heap"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/overload/oc"
)

// Options configure one run; Main fills them from SIPp-style flags.
type Options struct {
	Scenario    string        // -sn: uac, uas, register, options
	Target      string        // host:port of the server (all but uas)
	Transport   string        // -t: u1 (one UDP socket), t1 (one TCP connection) or l1 (one TLS connection)
	LocalIP     string        // -i; default: the address that routes to Target, or 127.0.0.1 for uas
	LocalPort   int           // -p; 0 picks a free port
	Service     string        // -s: user part of the Request-URI
	Schedule    Schedule      // offered rate over time
	MaxCalls    int64         // -m: stop after this many calls (0: no limit)
	Limit       int           // -l: most calls in flight (0: no limit)
	Hold        time.Duration // -d: time between ACK and BYE
	Timeout     time.Duration // -timeout: end the whole run after this long (0: none)
	RecvTimeout time.Duration // per transaction; 0 means 64*T1 (RFC 3261 timers B and F)
	T1          time.Duration // RFC 3261 T1, default 500ms
	T2          time.Duration // RFC 3261 T2, default 4s
	NoRetrans   bool          // -nr: no UDP retransmissions
	BufSize     int           // -buff_size: socket buffers, default 4 MiB
	Users       int           // client: calls are N users in turn, each refreshing its own (0: all new)
	Expires     int           // -sn register's Expires, and uas's in its answer; default 3600
	RejectEvery int           // server: refuse every Nth new INVITE with 503 and Retry-After (0: never)
	Scrape      string        // --scrape: Prometheus URL read each second

	// OC: client scenarios speak RFC 7339 overload control: the Via of
	// each request offers oc, and the feedback in responses sheds that
	// share of the calls due (never a request of a call under way).
	OC bool

	// XML, if set, is the SIPp scenario (-sf) run instead of Scenario;
	// without it Scenario's built-in XML is run.
	XML        *Scenario
	Rsa        string    // -rsa host:port: send there instead of Target
	Inf        []string  // -inf CSV files for [fieldN]
	AuthUser   string    // -au; default -s
	AuthPass   string    // -ap; default "password"
	MaxRetrans int       // -max_retrans: UDP retransmissions before a call fails (0: 5 for INVITE, 9 others)
	AutoAnswer bool      // -aa: answer unexpected INFO, NOTIFY, OPTIONS, UPDATE with 200
	CidStr     string    // -cid_str: Call-ID format, default %u-%p@%s
	BaseCSeq   int       // -base_cseq: first [cseq] of a call (default 1)
	TLSCert    string    // -tls_cert: l1's certificate (default cacert.pem)
	TLSKey     string    // -tls_key: its private key (default cakey.pem)
	TLSCA      string    // -tls_ca: verify the peer against this CA; "" verifies nothing
	TLSVersion string    // -tls_version: 1.0 to 1.3, only that one ("": 1.2 or later)
	TraceMsg   io.Writer // -trace_msg: every message sent and received
	TraceErr   io.Writer // -trace_err: unexpected messages and why calls failed
	injections []*injection
	trace      *tracer
	// xmlRecvTimeout is -recv_timeout as given: without it a scenario's
	// recv waits as long as SIPp's does (retransmissions aside), forever.
	xmlRecvTimeout time.Duration
	// Metrics, if set, counts this run's outcomes and response times.
	Metrics *Metrics
	// OnListen, if set, is called with the local address once bound.
	OnListen func(netip.AddrPort)
	// OnRow, if set, is called from the run's loop with each second's row.
	OnRow func(Row)
	// TLSGroups (-tls_groups) are the key exchange groups offered,
	// comma-separated; "": crypto/tls's.
	TLSGroups string
	// Handshakes (-tls_handshakes): each call is a new TLS connection,
	// closed once its handshake is done; no SIP is sent.
	Handshakes bool
	// TLSResume (-tls_resume): handshakes resume a session (tickets).
	TLSResume bool
}

// Stats is the outcome of a run.
type Stats struct {
	Counts
	Elapsed  time.Duration
	SetupP50 time.Duration
	SetupP90 time.Duration
	SetupP99 time.Duration
	// Failures are the failed calls by status line ("404 Not Found") or
	// reason ("timeout").
	Failures map[string]int64
	// Aborted calls were still in flight when the run was stopped by -timeout
	// or a signal; they are neither successes nor failures.
	Aborted int64
	// Resumed is how many of -tls_handshakes' succeeded ones resumed a
	// session.
	Resumed int64
	MaxLag  time.Duration
	MaxCPU  float64 // sipload's busiest second, in % of one core
	// TimedOut: -timeout ended the run.
	TimedOut bool
	Drops    int64
	// OCLastLoss and OCMaxLoss are, with -oc, the server's RFC 7339 loss
	// in force at the end of the run and the most it asked, percent.
	OCLastLoss, OCMaxLoss int
	Rows                  []Row
	// Warnings say when sipload itself could not keep up, so that a
	// generator bottleneck is never read as the server's.
	Warnings []string
}

// Budget lag above which the generator is reported as behind its schedule.
const lagWarn = 50 * time.Millisecond

// ErrUsage marks an invalid Options value.
var ErrUsage = errors.New("usage")

func (o *Options) defaults() error {
	if o.XML != nil && !o.XML.builtin {
		o.Scenario = "uac"
		if o.XML.uas {
			o.Scenario = "uas"
		}
		if o.XML.usesInf && len(o.Inf) == 0 {
			return fmt.Errorf("%w: %s uses [fieldN]: give its values with -inf FILE", ErrUsage, o.XML.File)
		}
	}
	if o.Scenario == "" {
		o.Scenario = "uac"
	}
	switch o.Scenario {
	case "uac", "uas", "register", "options":
	default:
		return fmt.Errorf("%w: unknown scenario %q (want uac, uas, register or options)", ErrUsage, o.Scenario)
	}
	switch o.Transport {
	case "":
		o.Transport = "u1"
	case "u1", "t1", "l1":
	default:
		return fmt.Errorf("%w: transport %q not supported (want u1, t1 or l1)", ErrUsage, o.Transport)
	}
	if _, ok := tlsVersions[o.TLSVersion]; !ok && o.TLSVersion != "" {
		return fmt.Errorf("%w: -tls_version %q: want 1.0, 1.1, 1.2 or 1.3", ErrUsage, o.TLSVersion)
	}
	if _, err := tlsGroups(o.TLSGroups); err != nil {
		return fmt.Errorf("%w: -tls_groups: %v", ErrUsage, err)
	}
	switch {
	case o.Handshakes && o.Transport != "l1":
		return fmt.Errorf("%w: -tls_handshakes needs -t l1", ErrUsage)
	case o.TLSResume && !o.Handshakes:
		return fmt.Errorf("%w: -tls_resume goes with -tls_handshakes (a run's one connection has one handshake)", ErrUsage)
	case o.Handshakes && o.Scenario == "uas":
		return fmt.Errorf("%w: -tls_handshakes is a client's: not with -sn uas", ErrUsage)
	}
	if o.Service == "" {
		o.Service = "service"
	}
	if o.T1 <= 0 {
		o.T1 = 500 * time.Millisecond
	}
	if o.T2 <= 0 {
		o.T2 = 4 * time.Second
	}
	if o.RecvTimeout <= 0 {
		o.RecvTimeout = 64 * o.T1
	}
	if o.BufSize <= 0 {
		o.BufSize = 4 << 20
	}
	if o.Expires <= 0 {
		o.Expires = 3600
	}
	if o.Schedule == nil {
		o.Schedule = Constant(10)
	}
	if o.XML == nil || o.XML.builtin && o.XML.File != o.Scenario {
		sc, err := compileBuiltin(o.Scenario, o)
		if err != nil {
			return err
		}
		o.XML = sc
	}
	if o.Scenario != "uas" {
		if o.Target == "" {
			return fmt.Errorf("%w: scenario %s needs a target host:port", ErrUsage, o.Scenario)
		}
		if _, _, err := net.SplitHostPort(o.Target); err != nil {
			o.Target = net.JoinHostPort(o.Target, "5060")
		}
	}
	return nil
}

// timer is a pending retransmission, timeout or pause of one call. gen ties it
// to one transaction of the call: a timer whose gen is stale is ignored,
// which is cheaper than removing it from the heap.
type timer struct {
	at   time.Duration
	c    *call
	gen  uint32
	kind uint8
}

const (
	tRetrans uint8 = iota
	tTimeout
)

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// role is the scenario-specific half of the loop.
type role interface {
	handle(m *msg, from peer, now time.Duration)
	fire(t timer, now time.Duration)
	tick(now time.Duration)
	done() bool
	inFlight() int64
	abort() int64
}

// core is the loop all scenarios share: it owns every call, timer and counter,
// so nothing needs a lock.
type core struct {
	o      *Options
	ep     *endpoint
	tr     transport
	target peer
	in     chan *packet
	errc   chan error
	sink   *sink
	start  time.Time
	timers timerHeap
	out    []byte // reused send buffer
	m      msg

	sec, tot       Counts
	secHist, total hist
	secLag, maxLag time.Duration
	rows           []Row
	dropsBase      int64
	dropsLast      int64
	cpuLast        time.Duration
	scr            *scraper
	secStart       time.Duration
	met            *runMetrics
	secFails       failTally
	totFails       failTally
	keyBuf         []byte
	timedOut       bool
	// oc is the server's RFC 7339 feedback (-oc), ocMax the most it asked.
	oc    oc.State
	ocMax int
}

// failed counts a failed call of this second under reason r and, by name,
// under key (a status line, or what went wrong).
func (c *core) failed(r failReason, key string) {
	c.sec.fail(r)
	c.keyBuf = append(c.keyBuf[:0], key...)
	c.secFails.add(c.keyBuf, 1)
}

// failedResp counts a call failed by the final response m.
func (c *core) failedResp(m *msg) {
	c.sec.fail(reasonOf(m.status, m.retryAfter))
	c.keyBuf = statusKey(c.keyBuf[:0], m)
	c.secFails.add(c.keyBuf, 1)
}

// setup records one successful request's response time.
func (c *core) setup(d time.Duration) {
	c.secHist.add(d)
	c.met.observe(d)
}

func (c *core) now() time.Duration { return time.Since(c.start) }

func (c *core) arm(at time.Duration, cl *call, kind uint8) {
	heap.Push(&c.timers, timer{at: at, c: cl, gen: cl.gen, kind: kind})
}

func (c *core) send(b []byte, to peer) bool {
	if err := c.tr.send(b, to); err != nil {
		c.sec.SendErrors++
		return false
	}
	return true
}

// Run executes one scenario until its schedule, -m or -timeout ends it, or
// ctx is cancelled, and returns what happened.
func Run(ctx context.Context, o Options) (Stats, error) {
	o.xmlRecvTimeout = o.RecvTimeout
	if err := o.defaults(); err != nil {
		return Stats{}, err
	}
	for _, f := range o.Inf {
		in, err := loadInjection(f)
		if err != nil {
			return Stats{}, fmt.Errorf("%w: -inf: %v", ErrUsage, err)
		}
		o.injections = append(o.injections, in)
	}
	if o.TraceMsg != nil || o.TraceErr != nil {
		o.trace = &tracer{msgs: o.TraceMsg, errs: o.TraceErr}
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	if o.Handshakes {
		return runHandshakes(ctx, &o)
	}
	c := &core{o: &o, in: make(chan *packet, 4096), errc: make(chan error, 16), secFails: failTally{}, totFails: failTally{}}
	c.sink = &sink{in: c.in, errc: c.errc, quit: make(chan struct{})}
	c.met = o.Metrics.forRun(o.XML.firstMethod())
	if err := c.open(); err != nil {
		return Stats{}, err
	}
	defer func() {
		c.tr.close()
		close(c.sink.quit)
	}()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	if o.Scrape != "" {
		c.scr = newScraper(o.Scrape)
		go c.scr.run(ctx)
		// The CSV's group columns come from the first read; give the server
		// a moment to answer before the first second is written.
		select {
		case <-c.scr.ready:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
	r := newXRole(c)
	err := c.loop(ctx, r)
	st := Stats{Counts: c.tot, Elapsed: c.now(), Rows: c.rows, MaxLag: c.maxLag, Drops: c.dropsLast - c.dropsBase, Failures: c.totFails.snapshot(), TimedOut: c.timedOut}
	st.OCLastLoss, st.OCMaxLoss = c.oc.Share(time.Now()), c.ocMax
	for _, r := range c.rows {
		if r.Elapsed-(r.Elapsed.Truncate(time.Second)) == 0 && r.GenCPU > st.MaxCPU {
			st.MaxCPU = r.GenCPU // whole seconds only: a short last one is noise
		}
	}
	st.SetupP50, st.SetupP90, st.SetupP99 = c.total.quantile(.5), c.total.quantile(.9), c.total.quantile(.99)
	st.Aborted = r.abort()
	if st.MaxLag > lagWarn {
		st.Warnings = append(st.Warnings, fmt.Sprintf("sipload fell behind its schedule by up to %v (CPU or scheduling on this host): offered rates in those seconds are sipload's limit, not the server's", st.MaxLag.Round(time.Millisecond)))
	}
	if cores := float64(runtime.GOMAXPROCS(0)); st.MaxCPU >= 90*cores {
		st.Warnings = append(st.Warnings, fmt.Sprintf("sipload used %.0f%% CPU in its busiest second, all of the %.0f core(s) it may use: its numbers may be limited by itself", st.MaxCPU, cores))
	}
	if st.Drops > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf("the kernel dropped %d datagrams on sipload's own socket (receive buffer full): those losses are the generator's; raise -buff_size and net.core.rmem_max", st.Drops))
	}
	if c.scr != nil {
		if n := c.scr.failures(); n > 0 {
			st.Warnings = append(st.Warnings, fmt.Sprintf("%d of the reads of %s failed; their group cells are empty", n, o.Scrape))
		}
	}
	if st.SendErrors > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf("%d sends failed on sipload's socket", st.SendErrors))
	}
	return st, err
}

func (c *core) open() error {
	o := c.o
	ip := o.LocalIP
	var target netip.AddrPort
	var sendTo netip.AddrPort
	if o.Scenario != "uas" || o.Target != "" {
		ua, err := net.ResolveUDPAddr("udp", o.Target)
		if err != nil {
			return fmt.Errorf("resolve target %s: %w", o.Target, err)
		}
		target = ua.AddrPort()
		target = netip.AddrPortFrom(target.Addr().Unmap(), target.Port())
		sendTo = target
		if o.Rsa != "" {
			ra, err := net.ResolveUDPAddr("udp", o.Rsa)
			if err != nil {
				return fmt.Errorf("resolve -rsa %s: %w", o.Rsa, err)
			}
			sendTo = netip.AddrPortFrom(ra.AddrPort().Addr().Unmap(), ra.AddrPort().Port())
			ua = ra
		}
		if ip == "" {
			// The address the kernel would send from is the one the server
			// can reply to.
			if pc, err := net.DialUDP("udp", nil, ua); err == nil {
				ip = pc.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap().String()
				pc.Close()
			}
		}
	}
	if ip == "" {
		ip = "127.0.0.1"
	}
	var tc *tls.Config
	if o.Transport == "l1" {
		host := o.Target
		if o.Rsa != "" {
			host = o.Rsa
		}
		host, _, _ = net.SplitHostPort(host)
		var err error
		if tc, err = o.tlsConfig(o.Scenario == "uas", host); err != nil {
			return err
		}
	}
	var err error
	switch {
	case o.Transport == "u1":
		c.tr, err = listenUDP(ip, o.LocalPort, o.BufSize, c.sink)
	case o.Scenario == "uas":
		c.tr, err = listenTCP(ip, o.LocalPort, tc, c.sink)
	default:
		c.tr, err = dialTCP(ip, sendTo.String(), tc, c.sink)
	}
	if err != nil {
		return err
	}
	c.target = peer{ap: sendTo}
	la := c.tr.localAddr()
	tp := transportName(o.Transport)
	runID := strconv.FormatInt(int64(os.Getpid()), 36) + strconv.FormatInt(time.Now().UnixNano()%(1<<30), 36)
	c.ep = newEndpoint(ip, int(la.Port()), target.String(), tp, o.Service, runID)
	if o.OnListen != nil {
		o.OnListen(netip.AddrPortFrom(la.Addr().Unmap(), la.Port()))
	}
	c.dropsBase = c.tr.drops()
	c.dropsLast = c.dropsBase
	c.cpuLast = cpuTime()
	return nil
}

func (c *core) loop(ctx context.Context, r role) error {
	c.start = time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	flusher, _ := c.tr.(*tcpTransport)
	nextRow := time.Second
	for {
		select {
		case p := <-c.in:
			now := c.now()
			c.handle(r, p, now)
			for i := 0; i < 256 && len(c.in) > 0; i++ {
				c.handle(r, <-c.in, now)
			}
			if flusher != nil {
				flusher.flush()
			}
		case <-tick.C:
			now := c.now()
			r.tick(now)
			for len(c.timers) > 0 && c.timers[0].at <= now {
				t := heap.Pop(&c.timers).(timer)
				if t.c.gen == t.gen {
					r.fire(t, now)
				}
			}
			if flusher != nil {
				flusher.flush()
			}
			for now >= nextRow {
				c.emit(r, nextRow)
				nextRow += time.Second
			}
			if r.done() {
				c.emit(r, now)
				return nil
			}
		case err := <-c.errc:
			if c.o.Transport != "u1" && c.o.Scenario != "uas" {
				// The reader sent everything before the connection's end:
				// handle it first, since a server may close right after
				// answering the last call.
				now := c.now()
				for len(c.in) > 0 {
					c.handle(r, <-c.in, now)
				}
				r.tick(now)
				c.emit(r, now)
				if r.done() {
					return nil
				}
				return err
			}
			c.sec.Unexpected++
		case <-ctx.Done():
			c.emit(r, c.now())
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				c.timedOut = true
				return nil
			}
			return ctx.Err()
		}
	}
}

func (c *core) handle(r role, p *packet, now time.Duration) {
	if err := c.m.scan(p.data); err != nil {
		c.sec.Unexpected++
	} else {
		r.handle(&c.m, p.from, now)
	}
	if cap(p.buf) == maxDatagram {
		b := p.buf
		bufPool.Put(&b)
	}
}

// emit closes the second ending at end (or the partial last one).
func (c *core) emit(r role, end time.Duration) {
	if end <= c.secStart {
		return
	}
	row := Row{Elapsed: end, TargetCPS: c.o.Schedule.RateAt(c.secStart), Counts: c.sec, Active: r.inFlight()}
	if c.o.Scenario == "uas" {
		row.TargetCPS = 0
	}
	row.SetupP50, row.SetupP90, row.SetupP99 = c.secHist.quantile(.5), c.secHist.quantile(.9), c.secHist.quantile(.99)
	row.GenLag = c.secLag
	row.OCLoss = c.oc.Share(time.Now())
	cpu := cpuTime()
	row.GenCPU = 100 * float64(cpu-c.cpuLast) / float64(end-c.secStart)
	c.cpuLast = cpu
	if d := c.tr.drops(); d >= 0 {
		row.RcvbufDrops = d - c.dropsLast
		c.dropsLast = d
	}
	if c.scr != nil {
		row.Groups = c.scr.latest()
	}
	c.tot.add(&c.sec)
	c.met.add(&c.sec)
	row.Failures = c.secFails.snapshot()
	for k, v := range row.Failures {
		c.keyBuf = append(c.keyBuf[:0], k...)
		c.totFails.add(c.keyBuf, v)
	}
	clear(c.secFails)
	row.Total = c.tot
	c.total.merge(&c.secHist)
	if c.secLag > c.maxLag {
		c.maxLag = c.secLag
	}
	c.sec = Counts{}
	c.secHist.reset()
	c.secLag = 0
	c.secStart = end
	c.rows = append(c.rows, row)
	if c.o.OnRow != nil {
		c.o.OnRow(row)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
