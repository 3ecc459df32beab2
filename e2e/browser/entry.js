// The page's copy of JsSIP: the npm package ships CommonJS sources only
// (lib/), so esbuild bundles them into build/jssip.js for a <script> tag.
window.JsSIP = require('jssip');
