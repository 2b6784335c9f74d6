// Node 20 lacks fs.globSync (Node 22), which @modelcontextprotocol/conformance imports by name for its
// tier-check command only. `node --import ./node20/register.mjs` gives that package an fs with a
// globSync that says so; every other module gets the real fs. The server command never calls it.
import { register } from 'node:module';

if (Number(process.versions.node.split('.')[0]) < 22) register('./hooks.mjs', import.meta.url);
