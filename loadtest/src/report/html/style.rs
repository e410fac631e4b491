//! The page's only stylesheet, inlined into `<style>`: a page that fetches nothing cannot link
//! one, and keeping the CSS apart from the markup keeps both readable.

/// Light by default, dark when the reader's system asks for it; charts take their colours from
/// the same variables so both schemes stay readable.
pub(super) const STYLE: &str = "
:root{color-scheme:light dark;--bg:#f4f5f7;--card:#fff;--fg:#1c2128;--muted:#59636e;
--line:#c9ced6;--grid:#e6e9ee;--ok:#1a7f37;--ok-bg:#dafbe1;--bad:#cf222e;--bad-bg:#ffebe9;
--s1:#2f6fdb;--s2:#1f9d55;--s3:#d9731a;--s4:#8250df;--s5:#cf222e}
@media (prefers-color-scheme:dark){:root{--bg:#0f1217;--card:#181c23;--fg:#e6edf3;
--muted:#9aa5b1;--line:#3a424d;--grid:#262c35;--ok:#4ac26b;--ok-bg:#12301d;--bad:#ff7b72;
--bad-bg:#3d1518;--s1:#6ca4ff;--s2:#4ac26b;--s3:#f0a04b;--s4:#b48cff;--s5:#ff7b72}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
header.top,main,footer{max-width:1240px;margin:0 auto;padding:0 20px}
header.top{display:grid;grid-template-columns:1fr auto;gap:8px 24px;padding-top:24px;
align-items:start}
.kicker{margin:0;color:var(--muted);font-size:13px;text-transform:uppercase;letter-spacing:.06em}
h1{margin:2px 0 4px;font-size:30px;line-height:1.15;overflow-wrap:anywhere}
.when{margin:0;color:var(--muted);overflow-wrap:anywhere}
.verdict{border-radius:12px;padding:14px 22px;text-align:right}
.verdict strong{display:block;font-size:28px;line-height:1.1;letter-spacing:.01em}
.verdict span{font-size:13px}
.verdict.ok{background:var(--ok-bg);color:var(--ok)}
.verdict.bad{background:var(--bad-bg);color:var(--bad)}
.facts{grid-column:1/-1;display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));
gap:8px 20px;margin:8px 0 0;padding:14px 16px;background:var(--card);border:1px solid var(--line);
border-radius:10px}
.facts dt{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.05em}
.facts dd{margin:0;overflow-wrap:anywhere}
section{margin:28px 0}
h2{font-size:19px;margin:0 0 10px}
h3{font-size:14px;margin:0 0 6px;color:var(--muted);font-weight:600}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.figure{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.figure .label{display:block;color:var(--muted);font-size:13px}
.figure .value{display:block;font-size:26px;font-weight:650;font-variant-numeric:tabular-nums}
.figure .note{display:block;color:var(--muted);font-size:12px}
.figure.bad{border-color:var(--bad);background:var(--bad-bg)}
.figure.bad .value,.figure.bad .label{color:var(--bad)}
.codes{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:10px;
margin-top:12px}
.codes>div{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.scroll{overflow-x:auto;background:var(--card);border:1px solid var(--line);border-radius:10px}
.codes .scroll{border:0;border-radius:0}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:6px 12px;text-align:left;vertical-align:top;border-bottom:1px solid var(--grid)}
thead th{color:var(--muted);font-weight:600;font-size:13px;white-space:nowrap}
tbody tr:last-child>*{border-bottom:0}
.num{text-align:right;white-space:nowrap}
td.text{overflow-wrap:break-word}
td.json code{overflow-wrap:anywhere}
.status{white-space:nowrap}
code{font:13px/1.4 ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace}
.yes{color:var(--ok);font-weight:600;white-space:nowrap}
.no,.bad-text{color:var(--bad);font-weight:600;white-space:nowrap}
.warn{color:var(--bad);font-weight:600}
.chart h3{margin:12px 14px 0;color:var(--fg);font-size:15px}
.nodata{color:var(--muted);font-style:italic;margin:0;padding:18px 14px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));gap:14px}
.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:10px;
overflow-x:auto}
.chart svg{display:block;width:100%;min-width:520px;height:auto}
.chart text{fill:var(--muted);font-size:13px}
.chart .title{fill:var(--fg);font-size:15px;font-weight:600}
.grid{stroke:var(--grid)}
.axis{stroke:var(--line)}
.bar{fill:var(--s1)}
.s1{color:var(--s1)}.s2{color:var(--s2)}.s3{color:var(--s3)}.s4{color:var(--s4)}
.s5{color:var(--s5)}
.col,.dot,.swatch{fill:currentColor}
.line{fill:none;stroke:currentColor;stroke-width:2;stroke-linejoin:round}
.halo{stroke:var(--card);stroke-width:5}
.pct{stroke:currentColor;stroke-width:2;stroke-dasharray:5 3}
.chart text.mark{fill:var(--muted);font-weight:600}
.mark tspan{fill:currentColor}
footer{color:var(--muted);font-size:12px;padding-bottom:28px}
@media (max-width:640px){header.top{grid-template-columns:1fr}.verdict{text-align:left}
h1{font-size:24px}.figure .value{font-size:22px}}
";
