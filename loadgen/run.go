package loadgen

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Options configure one run; Main fills them from SIPp-style flags.
type Options struct {
	Scenario    string        // -sn: uac, uas, register, options
	Target      string        // host:port of the server (all but uas)
	Transport   string        // -t: u1 (one UDP socket) or t1 (one TCP connection)
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
	Users       int           // register: distinct users; later registrations refresh them (0: all new)
	Expires     int           // register: Expires value, default 3600
	// AuthUser and AuthPass (-au, -ap) answer a 401 or 407 with digest
	// credentials, once per call, as SIPp's -au and -ap do; AuthUser
	// defaults to the registering user, or -s. No AuthPass: no answer.
	AuthUser    string
	AuthPass    string
	RejectEvery int    // uas: answer every Nth INVITE with 503 and Retry-After (0: never)
	Scrape      string // --scrape: Prometheus URL read each second
	// Metrics, if set, counts this run's outcomes and response times.
	Metrics *Metrics
	// OnListen, if set, is called with the local address once bound.
	OnListen func(netip.AddrPort)
	// OnRow, if set, is called from the run's loop with each second's row.
	OnRow func(Row)
}

// Stats is the outcome of a run.
type Stats struct {
	Counts
	Elapsed  time.Duration
	SetupP50 time.Duration
	SetupP90 time.Duration
	SetupP99 time.Duration
	// Aborted calls were still in flight when the run was stopped by -timeout
	// or a signal; they are neither successes nor failures.
	Aborted int64
	MaxLag  time.Duration
	MaxCPU  float64 // sipload's busiest second, in % of one core
	Drops   int64
	Rows    []Row
	// Warnings say when sipload itself could not keep up, so that a
	// generator bottleneck is never read as the server's.
	Warnings []string
}

// Budget lag above which the generator is reported as behind its schedule.
const lagWarn = 50 * time.Millisecond

// ErrUsage marks an invalid Options value.
var ErrUsage = errors.New("usage")

func (o *Options) defaults() error {
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
	case "u1", "t1":
	default:
		return fmt.Errorf("%w: transport %q not supported (want u1 or t1)", ErrUsage, o.Transport)
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

// timer is a pending retransmission, timeout or BYE of one call. gen ties it
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
	tBye
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
	if err := o.defaults(); err != nil {
		return Stats{}, err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	c := &core{o: &o, in: make(chan *packet, 4096), errc: make(chan error, 16)}
	c.sink = &sink{in: c.in, errc: c.errc, quit: make(chan struct{})}
	c.met = o.Metrics.forRun(map[string]string{"uac": "INVITE", "uas": "INVITE", "register": "REGISTER", "options": "OPTIONS"}[o.Scenario])
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
	var r role
	switch o.Scenario {
	case "uas":
		r = newUAS(c)
	default:
		r = newUAC(c)
	}
	err := c.loop(ctx, r)
	st := Stats{Counts: c.tot, Elapsed: c.now(), Rows: c.rows, MaxLag: c.maxLag, Drops: c.dropsLast - c.dropsBase}
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
	if o.Scenario != "uas" {
		ua, err := net.ResolveUDPAddr("udp", o.Target)
		if err != nil {
			return fmt.Errorf("resolve target %s: %w", o.Target, err)
		}
		target = ua.AddrPort()
		target = netip.AddrPortFrom(target.Addr().Unmap(), target.Port())
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
	var err error
	switch {
	case o.Transport == "u1":
		c.tr, err = listenUDP(ip, o.LocalPort, o.BufSize, c.sink)
	case o.Scenario == "uas":
		c.tr, err = listenTCP(ip, o.LocalPort, c.sink)
	default:
		c.tr, err = dialTCP(ip, target.String(), c.sink)
	}
	if err != nil {
		return err
	}
	c.target = peer{ap: target}
	la := c.tr.localAddr()
	tp := "UDP"
	if o.Transport == "t1" {
		tp = "TCP"
	}
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
			if c.o.Transport == "t1" && c.o.Scenario != "uas" {
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
