// Package browser tests SIP over secure WebSocket with a real WebRTC
// client: JsSIP (from npm, bundled by esbuild into build/jssip.js) in
// headless Chromium, driven over the DevTools protocol. .ci/run installs
// Chromium and builds the bundle:
//
//	apt-get install -y chromium
//	cd e2e/browser && npm ci && npm run build
//
// Without either, the tests skip and say which is missing (and fail in
// CI, where both must be there).
package browser
