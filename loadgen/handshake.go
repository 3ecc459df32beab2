package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// runHandshakes is -tls_handshakes: what TLS costs a server apart from
// the SIP it carries. Each call is a new connection to the target, closed
// (with close_notify) once its handshake is done; the schedule, -m, -l and
// -timeout rule as for calls, a handshake due while -l are under way
// counting as limited. A handshake succeeds when it completes within the
// transaction timeout (-recv_timeout); its time is the call's setup time.
//
// Without -tls_resume every handshake is a full one, from a client that
// could resume (it offers to, so the server sends a ticket, as to a phone
// connecting for the first time). With it, a first connection takes a
// ticket, and every handshake after it offers that ticket: resumed ones
// count as succeeded, and the summary says how many resumed.
func runHandshakes(ctx context.Context, o *Options) (Stats, error) {
	host, _, _ := net.SplitHostPort(o.Target)
	conf, err := o.tlsConfig(false, host)
	if err != nil {
		return Stats{}, err
	}
	h := &handshakes{o: o, conf: conf, start: time.Now(), fails: failTally{}}
	if o.TLSResume {
		seen := make(chan struct{}, 1)
		conf.ClientSessionCache = &notingCache{ClientSessionCache: tls.NewLRUClientSessionCache(1), put: seen}
		if err := h.prime(ctx, seen); err != nil {
			return Stats{}, err
		}
	} else {
		conf.ClientSessionCache = nil
	}
	return h.run(ctx), nil
}

type handshakes struct {
	o     *Options
	conf  *tls.Config
	start time.Time

	mu      sync.Mutex
	sec     Counts
	secHist hist
	resumed int64
	aborted int64
	fails   failTally
	key     []byte
}

// notingCache tells when crypto/tls stores a session: a client takes its
// ticket only as it reads after the handshake.
type notingCache struct {
	tls.ClientSessionCache
	put chan struct{}
}

func (c *notingCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs != nil {
		select {
		case c.put <- struct{}{}:
		default:
		}
	}
}

// dial makes one connection and its handshake, with a fresh session cache
// (a full handshake) unless resuming; timedOut: the transaction timeout
// ended it.
func (h *handshakes) dial(ctx context.Context) (c *tls.Conn, timedOut bool, err error) {
	conf := h.conf
	if !h.o.TLSResume {
		conf = conf.Clone()
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	hctx, cancel := context.WithTimeout(ctx, h.o.RecvTimeout)
	defer cancel()
	d := tls.Dialer{Config: conf}
	nc, err := d.DialContext(hctx, "tcp", h.o.Target)
	if err != nil {
		return nil, ctx.Err() == nil && hctx.Err() != nil, err
	}
	return nc.(*tls.Conn), false, nil
}

// prime makes the connection whose ticket the resumed handshakes offer.
func (h *handshakes) prime(ctx context.Context, seen <-chan struct{}) error {
	c, _, err := h.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// The ticket comes after the handshake; reading takes it. The server
	// sends nothing else, so the read ends by its deadline.
	c.SetReadDeadline(time.Now().Add(h.o.RecvTimeout))
	go c.Read(make([]byte, 1))
	select {
	case <-seen:
		return nil
	case <-time.After(h.o.RecvTimeout):
		return errors.New("-tls_resume: the server sent no session ticket")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// one makes one handshake and counts it; one the run's end cut short
// counts as neither a success nor a failure.
func (h *handshakes) one(ctx context.Context) {
	t0 := time.Now()
	c, timedOut, err := h.dial(ctx)
	d := time.Since(t0)
	if err == nil {
		resumed := c.ConnectionState().DidResume
		c.Close()
		h.mu.Lock()
		if resumed {
			h.resumed++
		}
		h.sec.Succeeded++
		h.secHist.add(d)
		h.mu.Unlock()
		return
	}
	if ctx.Err() != nil {
		h.mu.Lock()
		h.aborted++
		h.mu.Unlock()
		return
	}
	r, key := failOther, "handshake: "+err.Error()
	if timedOut {
		r, key = failTimeout, "timeout"
	}
	h.mu.Lock()
	h.sec.fail(r)
	h.key = append(h.key[:0], key...)
	h.fails.add(h.key, 1)
	h.mu.Unlock()
}

// run starts handshakes on schedule until the schedule, -m or the context
// ends, and waits for those under way.
func (h *handshakes) run(ctx context.Context) Stats {
	o := h.o
	var wg sync.WaitGroup
	var inflight chan struct{}
	if o.Limit > 0 {
		inflight = make(chan struct{}, o.Limit)
	}
	var st Stats
	st.Failures = map[string]int64{}
	var total hist
	secStart, cpuLast := time.Duration(0), cpuTime()
	emit := func(end time.Duration, lag time.Duration) {
		h.mu.Lock()
		row := Row{Elapsed: end, TargetCPS: o.Schedule.RateAt(secStart), Counts: h.sec, GenLag: lag}
		row.SetupP50, row.SetupP90, row.SetupP99 = h.secHist.quantile(.5), h.secHist.quantile(.9), h.secHist.quantile(.99)
		row.Failures = h.fails.snapshot()
		total.merge(&h.secHist)
		h.sec, h.secHist = Counts{}, hist{}
		clear(h.fails)
		h.mu.Unlock()
		cpu := cpuTime()
		if end > secStart {
			row.GenCPU = 100 * float64(cpu-cpuLast) / float64(end-secStart)
		}
		cpuLast, secStart = cpu, end
		st.Counts.add(&row.Counts)
		for k, v := range row.Failures {
			st.Failures[k] += v
		}
		row.Total = st.Counts
		st.MaxLag = max(st.MaxLag, lag)
		st.MaxCPU = max(st.MaxCPU, row.GenCPU)
		st.Rows = append(st.Rows, row)
		if o.OnRow != nil {
			o.OnRow(row)
		}
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var started int64
	var lag time.Duration
	done := false
	for !done {
		select {
		case <-ctx.Done():
			done = true
			st.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			continue
		case now := <-tick.C:
			el := now.Sub(h.start)
			for !done {
				if o.MaxCalls > 0 && started >= o.MaxCalls {
					done = true
					break
				}
				due, ok := o.Schedule.At(float64(started + 1))
				if !ok {
					done = true
					break
				}
				if due > el {
					break
				}
				lag = max(lag, el-due)
				started++
				if inflight != nil {
					select {
					case inflight <- struct{}{}:
					default:
						h.mu.Lock()
						h.sec.Limited++
						h.mu.Unlock()
						continue
					}
				}
				h.mu.Lock()
				h.sec.Offered++
				h.mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.one(ctx)
					if inflight != nil {
						<-inflight
					}
				}()
			}
			if el-secStart >= time.Second {
				emit(secStart+time.Second, lag)
				lag = 0
			}
		}
	}
	wg.Wait()
	emit(time.Since(h.start), lag)
	st.Elapsed = time.Since(h.start)
	st.SetupP50, st.SetupP90, st.SetupP99 = total.quantile(.5), total.quantile(.9), total.quantile(.99)
	st.Resumed, st.Aborted = h.resumed, h.aborted
	if len(st.Failures) == 0 {
		st.Failures = nil
	}
	return st
}
