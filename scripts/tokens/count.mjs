// Reads a JSON array of strings on stdin, prints a JSON array of their token counts (o200k_base).
import { encode } from "gpt-tokenizer/encoding/o200k_base";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const texts = JSON.parse(input);
process.stdout.write(JSON.stringify(texts.map((t) => encode(t).length)) + "\n");
