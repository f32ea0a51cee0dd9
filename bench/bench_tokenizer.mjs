// The JavaScript reference of bench_tokenizer: @huggingface/tokenizers encoding and decoding the
// same text. Usage: node bench/bench_tokenizer.mjs MODEL_DIR TEXT_FILE; prints one JSON object.
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const lib = join(here, "../tests/js/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib));
const [dir, file] = process.argv.slice(2);
const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")), config);
const text = readFileSync(file, "utf8");
const best = (f) => {
  let t = Infinity, r;
  for (let i = 0; i < 3; i++) {
    const t0 = process.hrtime.bigint();
    r = f();
    t = Math.min(t, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return [t, r];
};
const [enc_s, ids] = best(() => tok.encode(text).ids);
const [dec_s] = best(() => tok.decode(ids, { clean_up_tokenization_spaces: false }));
process.stdout.write(JSON.stringify({ tokens: ids.length, encode_s: enc_s, decode_s: dec_s }));
