// Token ids of npm's tiktoken (the Rust core of OpenAI's tiktoken, built to
// WebAssembly) for GPT-2's encoding: the expected values of
// tests/test_tokenizer_gpt2.c, and its speed, with gpt-3-encoder's.
//   node tests/tokenizer/tiktoken_ref.mjs ids NODE_MODULES_PARENT FILE [--special]
//     prints the ids of FILE, one per line (--special: <|endoftext|> allowed)
//   node tests/tokenizer/tiktoken_ref.mjs hash NODE_MODULES_PARENT FILE
//     prints "count fnv1a64" of FILE's ids, as test_tokenizer_gpt2 computes it
//   node tests/tokenizer/tiktoken_ref.mjs bench NODE_MODULES_PARENT FILE
//     prints MB/s of tiktoken and gpt-3-encoder on FILE, best of 5 runs in CPU
//     time (run it under taskset -c N for one core)
import { createRequire } from "module";
import { readFileSync } from "fs";

const [mode, modules, file, flag] = process.argv.slice(2);
const require = createRequire(modules.replace(/\/?$/, "/"));
const { get_encoding } = require("tiktoken");
const enc = get_encoding("gpt2");
const text = readFileSync(file, "utf8");

function fnv1a64(ids) {
  let h = 0xcbf29ce484222325n;
  const mask = (1n << 64n) - 1n;
  for (const id of ids)
    for (let k = 0; k < 4; k++) {
      h ^= BigInt((id >>> (8 * k)) & 0xff);
      h = (h * 0x100000001b3n) & mask;
    }
  return h.toString(16).padStart(16, "0");
}

if (mode === "ids") {
  const ids = flag === "--special" ? enc.encode(text, "all") : enc.encode_ordinary(text);
  process.stdout.write(Array.from(ids).join("\n") + "\n");
} else if (mode === "hash") {
  const ids = enc.encode_ordinary(text);
  console.log(`${ids.length} ${fnv1a64(ids)}`);
} else if (mode === "bench") {
  const mb = Buffer.byteLength(text, "utf8") / 1e6;
  const gpt3 = require("gpt-3-encoder");
  // gpt-3-encoder appends each piece's ids by copying the array so far
  // (quadratic in the text): given a line at a time, it runs at its best.
  const byLine = (s) => {
    let n = 0;
    for (const line of s.split(/(?<=\n)/)) n += gpt3.encode(line).length;
    return n;
  };
  for (const [name, f] of [["tiktoken", (s) => enc.encode_ordinary(s)], ["gpt-3-encoder, by line", byLine]]) {
    let best = Infinity;
    for (let r = 0; r < 5; r++) {
      // CPU time, not wall time: on a shared machine the process waits its turn
      const t0 = process.cpuUsage();
      f(text);
      const dt = process.cpuUsage(t0);
      best = Math.min(best, (dt.user + dt.system) / 1e6);
    }
    console.log(`${name}: ${(mb / best).toFixed(2)} MB/s (${best.toFixed(3)} s for ${mb.toFixed(2)} MB)`);
  }
}
enc.free();
