package main

import (
	"bytes"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// The traffic is the part of a call a proxy's SIP socket receives from the
// caller, as the front door reads it with worker_reply_sockets on: INVITE,
// then ACK, then BYE, each call with its own Call-ID, all from one
// address and port (one upstream peer, one trunk). The ACK of call c is
// sent when the INVITE of call c+lag is, and its BYE lag calls later, so
// that a call's messages are interleaved with other calls' as a proxy sees
// them, not back to back.
const lag = 7

// kinds of message, in the order of a call.
const (
	kindInvite = iota
	kindAck
	kindBye
)

// slotMessage says which message datagram number k of a run is, and
// whether there is one (the first slots have no ACK or BYE to send yet).
func slotMessage(k int) (call, kind int, ok bool) {
	kind = k % 3
	call = k/3 - kind*lag
	return call, kind, call >= 0
}

// sent says whether a run of k slots sent message kind of call.
func sent(call, kind, k int) bool {
	return 3*(call+kind*lag)+kind < k
}

func kindOf(m sipscan.Method) int {
	switch m {
	case sipscan.Invite:
		return kindInvite
	case sipscan.Ack:
		return kindAck
	case sipscan.Bye:
		return kindBye
	}
	return -1
}

// callIndex reads the call's number back from its Call-ID.
func callIndex(callID []byte) (int, bool) {
	i := bytes.IndexByte(callID, '-')
	j := bytes.IndexByte(callID, '@')
	if i < 0 || j < i {
		return 0, false
	}
	n, err := strconv.Atoi(string(callID[i+1 : j]))
	return n, err == nil && n >= 0
}

// message writes message kind of call into b: about 600 bytes for the
// INVITE (with its SDP), 330 for ACK and BYE.
func message(b []byte, call, kind int) []byte {
	id := strconv.AppendInt([]byte("dr7f3c9a1e-"), int64(call), 10)
	id = append(id, "@198.51.100.7"...)
	br := strconv.AppendInt([]byte("z9hG4bK-"), int64(call*3+kind), 10)
	method, cseq := "INVITE", "1 INVITE"
	toTag := ""
	switch kind {
	case kindAck:
		method, cseq, toTag = "ACK", "1 ACK", ";tag=as5f0c1d2e"
	case kindBye:
		method, cseq, toTag = "BYE", "2 BYE", ";tag=as5f0c1d2e"
	}
	b = append(b[:0], method...)
	b = append(b, " sip:+4930123456@127.0.0.1:5060 SIP/2.0\r\n"...)
	b = append(b, "Via: SIP/2.0/UDP 127.0.0.1:5070;branch="...)
	b = append(b, br...)
	b = append(b, "\r\nMax-Forwards: 70\r\nFrom: \"Caller\" <sip:+4940987654@198.51.100.7>;tag=8f2a"...)
	b = strconv.AppendInt(b, int64(call), 10)
	b = append(b, "\r\nTo: <sip:+4930123456@127.0.0.1>"...)
	b = append(b, toTag...)
	b = append(b, "\r\nCall-ID: "...)
	b = append(b, id...)
	b = append(b, "\r\nCSeq: "...)
	b = append(b, cseq...)
	b = append(b, "\r\nContact: <sip:+4940987654@127.0.0.1:5070>\r\nUser-Agent: directread\r\n"...)
	if kind != kindInvite {
		return append(b, "Content-Length: 0\r\n\r\n"...)
	}
	const sdp = "v=0\r\no=- 3912 3912 IN IP4 198.51.100.7\r\ns=-\r\nc=IN IP4 198.51.100.7\r\nt=0 0\r\n" +
		"m=audio 40000 RTP/AVP 8 0 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:0 PCMU/8000\r\n" +
		"a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\na=sendrecv\r\n"
	b = append(b, "Content-Type: application/sdp\r\nAllow: INVITE, ACK, CANCEL, BYE, OPTIONS\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(sdp)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, sdp...)
}

// senderStats is what the sender reports when it is done.
type senderStats struct {
	slots   int     // datagrams numbered (sent or not: the first ACK and BYE slots are empty)
	sent    int     // datagrams sent
	errs    int     // sends that failed
	wakes   int     // sleeps the pacing loop woke from
	cpuUS   float64 // the sending thread's CPU over the run
	elapsed time.Duration
}

// send paces datagrams at rate per second for d from fd, a connected UDP
// socket, on a thread of its own: it sleeps until the next datagram is
// due (clock_nanosleep, with the thread's timer slack at its minimum, as
// Go's timers have a millisecond's resolution here) and then sends every
// datagram that is due. At 40,000/s a wake-up sends one to three.
func send(fd, rate int, d time.Duration, started chan<- time.Time) senderStats {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var st senderStats
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	buf := make([]byte, 0, 1500)
	var ts0 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts0)
	t0 := time.Now()
	started <- t0
	total := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	for st.slots < total {
		var now unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
		el := time.Duration(now.Nano() - ts0.Nano())
		due := min(int(el/interval)+1, total)
		for ; st.slots < due; st.slots++ {
			call, kind, ok := slotMessage(st.slots)
			if !ok {
				continue
			}
			buf = message(buf, call, kind)
			if _, e := rawio.Write(fd, buf); e != 0 && e != syscall.EINTR {
				st.errs++
				continue
			}
			st.sent++
		}
		next := unix.NsecToTimespec(ts0.Nano() + int64(time.Duration(st.slots)*interval))
		for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &next, nil) == unix.EINTR {
		}
		st.wakes++
	}
	st.elapsed = time.Since(t0)
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	st.cpuUS = float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / 1e3
	return st
}
