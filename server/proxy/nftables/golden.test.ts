import { join } from 'node:path';
import { describeGoldenCases } from '../golden.ts';
import { nftablesGolden } from './golden.ts';

/**
 * Golden cases (../golden.ts runs them): testdata/<case>/input.yaml holds
 * Services, EndpointSlices, a Node and optionally a GoldenOptions document
 * (NftGoldenOptions); expected.nft is the kube-proxy table as the simulated
 * kernel lists it after one full sync, written as `nft -f` input.
 * UPDATE_GOLDEN=1 rewrites expected.nft; by default it is compared.
 */
describeGoldenCases('nftables golden cases', nftablesGolden, { testdata: join(import.meta.dirname, 'testdata'), atLeast: 11 });
