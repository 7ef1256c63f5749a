import { join } from 'node:path';
import { describeGoldenCases } from '../golden.ts';
import { ipvsGolden } from './golden.ts';

/**
 * Golden cases (../golden.ts runs them): testdata/<case>/input.yaml holds
 * Services, EndpointSlices, a Node and optionally a GoldenOptions document
 * (IpvsGoldenOptions); expected.txt is what the simulated kernel holds after
 * one full sync: `ipvsadm -Sn`, `ipset save`, the addresses on kube-ipvs0 and
 * the nat and filter tables. UPDATE_GOLDEN=1 rewrites them.
 */
describeGoldenCases('IPVS golden cases', ipvsGolden, { testdata: join(import.meta.dirname, 'testdata'), atLeast: 11 });
