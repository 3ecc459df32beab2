package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/pool"
)

// dsRun is the supervisor's side of the destination sets: it probes every
// destination with OPTIONS from a UDP socket of its own, keeps each one's
// Health (the one truth of its state, which `ctl ds set` changes too), and
// sends the states to every worker (wire.FrameDispatch) when they change
// and to each new worker. The supervisor probes rather than a timer
// worker: it outlives every worker and every reload, so a destination's
// state and counters survive both, and it serves `ctl ds list` and the
// metrics from what it holds.
type dsRun struct {
	s *Supervisor

	mu     sync.Mutex
	cfg    *config.Config // the config the table was built from
	dests  []dispatcher.Dest
	health []dispatcher.Health
	load   []dsLoad
	addrs  []*net.UDPAddr // nil: not probed (a stream transport, or unresolved)
	// unresolved holds the URI of each destination whose host name is
	// still to resolve (resolve), "" for the others.
	unresolved []string
	// tcp holds the host:port of each destination probed over TCP, a
	// connection a probe, "" for the others.
	tcp   []string
	shown []dispatcher.Status // the states as last sent to workers
	gen   uint64
	sent  map[*pool.Worker]uint64 // the generation each worker has
	// kick wakes the loop at once after a change by hand or by a script.
	kick chan struct{}

	dsProber
}

// dsProber is what the probes of dsRun are sent and matched with.
type dsProber struct {
	probe   dispatcher.Probe
	from    string
	pending map[string]int // probe branch → destination
	seq     uint64
	tag     string
	conn    *net.UDPConn
}

// dsLoad counts what the workers sent a destination.
type dsLoad struct {
	sent, failovers uint64
	// shed: new sessions the workers did not send for its RFC 7339 loss.
	shed uint64
	// rate is new calls a second over the last dsRateWindow.
	rate             float64
	windowAt         time.Time
	windowStartCount uint64
}

const (
	// dsTick is the grain of the probe timers and of the workers' updates.
	dsTick = 50 * time.Millisecond
	// dsRateWindow is what the load rate of `ctl ds list` averages over.
	dsRateWindow = 5 * time.Second
)

func newDSRun(s *Supervisor) *dsRun {
	var tag [6]byte
	rand.Read(tag[:])
	return &dsRun{s: s, sent: map[*pool.Worker]uint64{}, kick: make(chan struct{}, 1),
		dsProber: dsProber{pending: map[string]int{}, tag: hex.EncodeToString(tag[:])}}
}

// probeAddr is the local address probes leave from: the first UDP SIP
// socket's IP (so that a backend that checks the source sees this
// server), on a port of their own.
func (d *dsRun) probeAddr() *net.UDPAddr {
	for _, sk := range d.s.sockets.list {
		if sk.UDP != nil {
			if a, ok := sk.UDP.LocalAddr().(*net.UDPAddr); ok {
				return &net.UDPAddr{IP: a.IP}
			}
		}
	}
	return &net.UDPAddr{}
}

func (d *dsRun) loop(ctx context.Context) error {
	defer func() {
		d.mu.Lock()
		if d.conn != nil {
			d.conn.Close()
		}
		d.mu.Unlock()
	}()
	d.update(time.Now())
	// Without destinations the loop sleeps until a reload, which pokes it,
	// brings some: an idle supervisor wakes for its cycle, not for a
	// dispatcher it does not run.
	some := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.dests) > 0
	}
	t := time.NewTicker(dsTick)
	defer t.Stop()
	ticking := some()
	if !ticking {
		t.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.kick:
		}
		d.resolve()
		d.update(time.Now())
		if s := some(); s != ticking {
			ticking = s
			if s {
				t.Reset(dsTick)
			} else {
				t.Stop()
			}
		}
	}
}

func (d *dsRun) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// update takes a reloaded list, runs the probe timers, sends the probes
// due and the states to the workers that lack them.
func (d *dsRun) update(now time.Time) {
	d.mu.Lock()
	if cfg := d.s.config(); cfg != d.cfg {
		d.rebuild(cfg)
	}
	if d.conn == nil && d.probe.Interval > 0 && slices.ContainsFunc(d.addrs, func(a *net.UDPAddr) bool { return a != nil }) {
		// Opened with the first destination to probe: a server without
		// destination sets has no socket for them.
		conn, err := net.ListenUDP("udp", d.probeAddr())
		if err != nil {
			d.s.log.Error("dispatcher: no socket to probe destinations from", "error", err)
		} else {
			d.conn = conn
			go d.read(conn)
		}
	}
	type out struct {
		b  []byte
		to *net.UDPAddr
	}
	var probes []out
	var tcpProbes []tcpProbe
	for i := range d.health {
		if (d.conn == nil || d.addrs[i] == nil) && d.tcp[i] == "" || !d.health[i].Tick(now, &d.probe) {
			continue
		}
		d.health[i].Sent(now, &d.probe)
		d.seq++
		branch := "z9hG4bK-ds-" + d.tag + "-" + strconv.FormatUint(d.seq, 36)
		for b, j := range d.pending {
			if j == i {
				delete(d.pending, b) // its timeout has been counted
			}
		}
		d.pending[branch] = i
		if d.tcp[i] != "" {
			tcpProbes = append(tcpProbes, tcpProbe{to: d.tcp[i], uri: d.dests[i].URI, from: d.from, tag: d.tag, branch: branch, seq: d.seq, timeout: d.probe.Timeout})
			if tcpProbes[len(tcpProbes)-1].timeout <= 0 {
				tcpProbes[len(tcpProbes)-1].timeout = d.probe.Interval
			}
			continue
		}
		local := d.conn.LocalAddr().(*net.UDPAddr)
		probes = append(probes, out{options(d.dests[i].URI, d.from, d.tag, "UDP", local.String(), branch, d.seq), d.addrs[i]})
	}
	changed := false
	for i := range d.health {
		if st := d.health[i].Status(now); st != d.shown[i] {
			d.s.log.Info("destination state", "set", d.dests[i].Set, "uri", d.dests[i].URI, "state", st.String(), "was", d.shown[i].String(), "rtt", d.health[i].RTT)
			d.shown[i], changed = st, true
		}
	}
	if changed {
		d.gen++
	}
	for i := range d.load {
		l := &d.load[i]
		if now.Sub(l.windowAt) >= dsRateWindow {
			if !l.windowAt.IsZero() {
				l.rate = float64(l.sent-l.windowStartCount) / now.Sub(l.windowAt).Seconds()
			}
			l.windowAt, l.windowStartCount = now, l.sent
		}
	}
	frame := d.frame()
	conn := d.conn
	d.mu.Unlock()

	for _, p := range tcpProbes {
		go d.probeTCP(p)
	}
	for _, p := range probes {
		if conn == nil {
			break
		}
		if _, err := conn.WriteToUDP(p.b, p.to); err != nil {
			d.s.log.Debug("probe not sent", "to", p.to.String(), "error", err)
		}
	}
	d.sendStates(frame)
}

// rebuild takes the destinations of a new config, keeping the state and
// counters of those that stay.
func (d *dsRun) rebuild(cfg *config.Config) {
	old := map[string]int{}
	for i := range d.dests {
		old[d.dests[i].Key()] = i
	}
	dests := cfg.Dispatcher.Dests
	health := make([]dispatcher.Health, len(dests))
	load := make([]dsLoad, len(dests))
	shown := make([]dispatcher.Status, len(dests))
	addrs := make([]*net.UDPAddr, len(dests))
	unresolved := make([]string, len(dests))
	tcp := make([]string, len(dests))
	for i := range dests {
		if j, ok := old[dests[i].Key()]; ok {
			health[i], load[i], shown[i] = d.health[j], d.load[j], d.shown[j]
			// The list's flags apply again: disabled there is disabled,
			// enabled there is no longer.
			if dests[i].Flags&dispatcher.FlagDisabled != 0 {
				health[i].Manual = dispatcher.Disabled
			} else if health[i].Manual == dispatcher.Disabled {
				health[i].Manual = dispatcher.Active
			}
		} else {
			health[i] = dispatcher.NewHealth(&dests[i])
			shown[i] = health[i].Status(time.Time{})
		}
		host, port, proto := probeTarget(dests[i].URI)
		switch ip := net.ParseIP(host); {
		case proto == "":
			if dests[i].Flags&dispatcher.FlagDisabled == 0 {
				d.s.log.Warn("destination not probed: TLS destinations are not", "set", dests[i].Set, "uri", dests[i].URI)
			}
		case proto == "tcp":
			tcp[i] = net.JoinHostPort(host, strconv.Itoa(port))
		case ip != nil:
			addrs[i] = &net.UDPAddr{IP: ip, Port: port}
		default:
			unresolved[i] = dests[i].URI
		}
	}
	d.cfg, d.dests, d.health, d.load, d.shown, d.addrs, d.unresolved, d.tcp = cfg, dests, health, load, shown, addrs, unresolved, tcp
	d.probe = cfg.Dispatcher.Probe()
	d.from = cfg.Dispatcher.PingFrom
	d.pending = map[string]int{}
	d.gen++
}

// probeTarget is where a destination is probed: its host and port, and
// its transport, udp or tcp ("" for TLS, which is not probed).
func probeTarget(uri string) (host string, port int, proto string) {
	var u sip.Uri
	if err := sip.ParseUri(uri, &u); err != nil {
		return "", 0, ""
	}
	proto = "udp"
	if t, ok := u.UriParams.Get("transport"); ok {
		proto = strings.ToLower(t)
	}
	if u.Scheme == "sips" || (proto != "udp" && proto != "tcp") {
		return "", 0, ""
	}
	port = u.Port
	if port == 0 {
		port = 5060
	}
	return strings.Trim(u.Host, "[]"), port, proto
}

// resolve finds the addresses of the destinations named by a host name,
// outside the lock: a slow resolver holds neither the probes of the others
// nor a worker's call for the states. One that does not resolve is not
// probed until the list is reloaded.
func (d *dsRun) resolve() {
	d.mu.Lock()
	cfg := d.cfg
	type job struct {
		i    int
		host string
		port int
	}
	var todo []job
	for i, uri := range d.unresolved {
		if uri != "" {
			host, port, _ := probeTarget(uri)
			todo = append(todo, job{i, host, port})
		}
	}
	d.mu.Unlock()
	for _, j := range todo {
		a, err := net.ResolveUDPAddr("udp", net.JoinHostPort(j.host, strconv.Itoa(j.port)))
		d.mu.Lock()
		if d.cfg == cfg {
			d.unresolved[j.i] = ""
			if err != nil {
				d.s.log.Warn("destination not probed: its host does not resolve", "set", d.dests[j.i].Set, "uri", d.dests[j.i].URI, "error", err)
			} else {
				d.addrs[j.i] = a
			}
		}
		d.mu.Unlock()
	}
}

// options is a probe of uri sent from local over proto.
func options(uri, from, tag, proto, local, branch string, seq uint64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "OPTIONS %s SIP/2.0\r\n", uri)
	fmt.Fprintf(&b, "Via: SIP/2.0/%s %s;branch=%s;rport\r\n", proto, local, branch)
	fmt.Fprintf(&b, "Max-Forwards: 70\r\n")
	fmt.Fprintf(&b, "From: <%s>;tag=%s\r\n", from, tag)
	fmt.Fprintf(&b, "To: <%s>\r\n", uri)
	host, _, _ := net.SplitHostPort(local)
	fmt.Fprintf(&b, "Call-ID: %s@%s\r\n", branch[len("z9hG4bK-"):], host)
	fmt.Fprintf(&b, "CSeq: %d OPTIONS\r\n", seq)
	fmt.Fprintf(&b, "Content-Length: 0\r\n\r\n")
	return b.Bytes()
}

// read takes the replies to the probes sent over UDP.
func (d *dsRun) read(conn *net.UDPConn) {
	buf := make([]byte, 65535)
	for {
		n, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if code, branch, ok := probeReply(buf[:n]); ok && code >= 200 {
			d.answered(branch, code)
		}
	}
}

// answered records the final reply to the probe of branch; code 0 is a
// probe that failed before any reply (a TCP connection refused).
func (d *dsRun) answered(branch string, code int) {
	now := time.Now()
	d.mu.Lock()
	i, ok := d.pending[branch]
	if ok {
		delete(d.pending, branch)
		if code == 0 {
			d.health[i].Failed(&d.probe)
		} else {
			d.health[i].Answered(now, code, &d.probe)
		}
	}
	d.mu.Unlock()
	if ok {
		d.poke()
	}
}

// tcpProbe is a probe over TCP: a connection of its own, closed after the
// reply, as Kamailio's probes over TCP open one when none is up.
type tcpProbe struct {
	to, uri, from, tag, branch string
	seq                        uint64
	timeout                    time.Duration
}

func (d *dsRun) probeTCP(p tcpProbe) {
	c, err := net.DialTimeout("tcp", p.to, p.timeout)
	if err != nil {
		d.answered(p.branch, 0)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(p.timeout))
	if _, err := c.Write(options(p.uri, p.from, p.tag, "TCP", c.LocalAddr().String(), p.branch, p.seq)); err != nil {
		d.answered(p.branch, 0)
		return
	}
	// Replies up to the final one; a provisional is skipped. The timeout
	// of an unanswered probe is Health's, at the next tick.
	var buf []byte
	tmp := make([]byte, 4096)
	for len(buf) < 1<<16 {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for {
			end := bytes.Index(buf, []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			code, branch, ok := probeReply(buf[:end+4])
			buf = buf[end+4:]
			if ok && code >= 200 && branch == p.branch {
				d.answered(p.branch, code)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// probeReply reads a reply's code and its top Via's branch.
func probeReply(b []byte) (code int, branch string, ok bool) {
	if !bytes.HasPrefix(b, []byte("SIP/2.0 ")) || len(b) < 11 {
		return 0, "", false
	}
	code, err := strconv.Atoi(string(b[8:11]))
	if err != nil {
		return 0, "", false
	}
	i := bytes.Index(b, []byte(";branch="))
	if i < 0 {
		return 0, "", false
	}
	rest := b[i+len(";branch="):]
	end := bytes.IndexAny(rest, ";, \r\n")
	if end < 0 {
		return 0, "", false
	}
	return code, string(rest[:end]), true
}

// frame is the states for the workers; d.mu held.
func (d *dsRun) frame() []byte {
	s := dispatcher.States{Gen: d.gen, Status: make(map[string]dispatcher.Status, len(d.dests))}
	for i := range d.dests {
		s.Status[d.dests[i].Key()] = d.shown[i]
		if h := &d.health[i]; h.OC.Has {
			if s.OC == nil {
				s.OC = map[string]oc.State{}
			}
			s.OC[d.dests[i].Key()] = h.OC
		}
	}
	return append([]byte{wire.FrameDispatch}, dispatcher.EncodeStates(s)...)
}

// states answers a new worker's DispatchStatesRequest with the states as
// they are now: that worker needs no frame until the next change.
func (d *dsRun) states(w *pool.Worker) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg := d.s.config(); cfg != d.cfg {
		d.rebuild(cfg)
	}
	now := time.Now()
	for i := range d.health {
		d.shown[i] = d.health[i].Status(now)
	}
	d.sent[w] = d.gen
	return d.frame()[1:]
}

// sendStates sends the states to every worker that has not had this
// generation: all after a change, a new worker once it is up.
func (d *dsRun) sendStates(frame []byte) {
	d.mu.Lock()
	gen := d.gen
	live := map[*pool.Worker]bool{}
	var to []*pool.Worker
	for _, gr := range d.s.groupRuns() {
		for _, w := range gr.g.Workers() {
			if st := w.State(); st != pool.Ready && st != pool.Spawning {
				continue
			}
			live[w] = true
			if d.sent[w] != gen {
				to = append(to, w)
			}
		}
	}
	for w := range d.sent {
		if !live[w] {
			delete(d.sent, w)
		}
	}
	d.mu.Unlock()
	for _, w := range to {
		if w.SendOwn(frame) == nil {
			d.mu.Lock()
			d.sent[w] = gen
			d.mu.Unlock()
		}
	}
}

// note takes a worker's report (wire.DispatchNote); false when the note is
// another kind.
func (d *dsRun) note(b []byte) bool {
	raw, ok := wire.ParseDispatchNote(b)
	if !ok {
		return false
	}
	r, err := dispatcher.DecodeReport(raw)
	if err != nil {
		d.s.log.Warn("worker's destination report unreadable", "error", err)
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	index := func(key string) (int, bool) {
		for i := range d.dests {
			if d.dests[i].Key() == key {
				return i, true
			}
		}
		return 0, false
	}
	for k, n := range r.Sent {
		if i, ok := index(k); ok {
			d.load[i].sent += n
		}
	}
	for k, n := range r.Failovers {
		if i, ok := index(k); ok {
			d.load[i].sent += n
			d.load[i].failovers += n
		}
	}
	for k, st := range r.Mark {
		i, ok := index(k)
		if !ok {
			continue
		}
		switch st {
		case dispatcher.Active:
			d.health[i].Down, d.health[i].Fails = false, 0
		default:
			// A script saw it fail: down until a probe is answered, as
			// Kamailio's ds_mark_dst("ip").
			d.health[i].Down = true
		}
		d.s.log.Info("destination marked by the script", "set", d.dests[i].Set, "uri", d.dests[i].URI, "state", st.String())
	}
	changed := false
	for k, st := range r.OC {
		if i, ok := index(k); ok && d.health[i].TakeOC(st) {
			changed = true
		}
	}
	for k, ms := range r.Hold {
		if i, ok := index(k); ok {
			until := time.UnixMilli(ms)
			if until.After(d.health[i].HoldUntil) {
				d.s.log.Info("destination held: it answered 503 with Retry-After", "set", d.dests[i].Set, "uri", d.dests[i].URI, "until", until.Format(time.RFC3339Nano))
			}
			d.health[i].Hold(until)
		}
	}
	for k, n := range r.Shed {
		if i, ok := index(k); ok {
			d.load[i].shed += n
		}
	}
	if changed {
		// The other workers take the feedback with the next frame.
		d.gen++
	}
	if len(r.Mark) > 0 || len(r.Hold) > 0 || changed {
		defer d.poke()
	}
	return true
}

// dsDest is one destination as `ctl ds list` shows it.
type dsDest struct {
	dispatcher.Dest
	State     string
	RTT       time.Duration
	Probes    uint64
	Failures  uint64
	LastCode  int
	Sent      uint64
	Failovers uint64
	Rate      float64
	Probed    bool
	// Loss is the share of new sessions shed for the destination's RFC
	// 7339 feedback now, percent, and LossUntil when that feedback expires;
	// Shed counts the sessions shed so far.
	Loss      int
	LossUntil time.Time `json:",omitzero"`
	Shed      uint64
}

func (d *dsRun) list(now time.Time) []dsDest {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg := d.s.config(); cfg != d.cfg {
		d.rebuild(cfg)
	}
	out := make([]dsDest, len(d.dests))
	for i := range d.dests {
		h, l := &d.health[i], &d.load[i]
		out[i] = dsDest{Dest: d.dests[i], State: h.Status(now).String(), RTT: h.RTT, Probes: h.Probes, Failures: h.Failures,
			LastCode: h.LastCode, Sent: l.sent, Failovers: l.failovers, Rate: l.rate,
			Probed: (d.addrs[i] != nil || d.tcp[i] != "") && d.probe.Interval > 0,
			Loss:   h.OC.Share(now), Shed: l.shed}
		if out[i].Loss > 0 {
			out[i].LossUntil = h.OC.Until
		}
	}
	return out
}

// set changes a destination's state by hand: inactive and drain hold
// until active, which makes it active now and returns it to the probes.
func (d *dsRun) set(set int, uri string, state string) error {
	st, err := dispatcher.ParseStatus(state)
	if err != nil || (st != dispatcher.Active && st != dispatcher.Inactive && st != dispatcher.Drain) {
		return fmt.Errorf("state %q: want active, inactive or drain", state)
	}
	d.mu.Lock()
	if cfg := d.s.config(); cfg != d.cfg {
		d.rebuild(cfg)
	}
	found := -1
	for i := range d.dests {
		if d.dests[i].Set == set && d.dests[i].URI == uri {
			found = i
		}
	}
	if found < 0 {
		d.mu.Unlock()
		return fmt.Errorf("no destination %s in set %d", uri, set)
	}
	if d.health[found].Manual == dispatcher.Disabled {
		d.mu.Unlock()
		return fmt.Errorf("destination %s of set %d is disabled in the list (flag 4)", uri, set)
	}
	h := &d.health[found]
	h.Manual = st
	if st == dispatcher.Active {
		// Active by hand is active now, as Kamailio's set_state "a": the
		// probes, when on, find it down again if it is.
		h.Down, h.Fails, h.HoldUntil = false, 0, time.Time{}
	}
	d.mu.Unlock()
	d.s.log.Info("destination set by hand", "set", set, "uri", uri, "state", state)
	d.update(time.Now())
	return nil
}

// dsCollector exports each destination's state, RTT and counters; every
// destination of the list has its series from the start.
type dsCollector struct {
	d                                           *dsRun
	state, rtt, probes, failures, sent, failovs *prometheus.Desc
	loss, shed                                  *prometheus.Desc
}

func newDSCollector(d *dsRun) *dsCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("sipvisor", "dispatcher", name), help, append([]string{"set", "uri"}, labels...), nil)
	}
	return &dsCollector{d: d,
		state:    desc("destination_state", "1 for the state each destination of ds_list_file is in (active, probing, inactive, disabled, drain), 0 for the others.", "state"),
		rtt:      desc("destination_rtt_seconds", "Round trip of the last OPTIONS probe the destination answered."),
		probes:   desc("probes_total", "OPTIONS probes sent to the destination."),
		failures: desc("probe_failures_total", "Probes the destination did not answer in time, or answered with a code ds_ping_reply_codes does not accept."),
		sent:     desc("sent_total", "New requests the workers sent to the destination (ds_select_dst and ds_next_dst)."),
		failovs:  desc("failovers_total", "Requests sent to the destination by ds_next_dst after another failed."),
		loss:     desc("destination_loss_ratio", "Share of the new sessions for the destination shed before sending, as its RFC 7339 feedback asks (0 when it sent none, or it expired)."),
		shed:     desc("shed_total", "New sessions not sent to the destination for its RFC 7339 feedback: sent to another destination of the set, or answered 503."),
	}
}

func (c *dsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.rtt, c.probes, c.failures, c.sent, c.failovs, c.loss, c.shed} {
		ch <- d
	}
}

func (c *dsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.d.list(time.Now()) {
		set := strconv.Itoa(d.Set)
		for _, st := range dispatcher.Statuses() {
			v := 0.0
			if st.String() == d.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, set, d.URI, st.String())
		}
		ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, d.RTT.Seconds(), set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(d.Probes), set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(d.Failures), set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(d.Sent), set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.failovs, prometheus.CounterValue, float64(d.Failovers), set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.loss, prometheus.GaugeValue, float64(d.Loss)/100, set, d.URI)
		ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(d.Shed), set, d.URI)
	}
}
