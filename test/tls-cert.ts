import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** SelfSigned is a certificate and key made for one test, with the certificate's SHA-256 fingerprint. */
export interface SelfSigned {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: string;
  readonly fingerprint: string;
}

/**
 * selfSignedCert makes a fresh EC P-256 key and a self-signed certificate for
 * localhost and 127.0.0.1, valid for a day, with openssl (Debian's openssl
 * package; .ci/install-debian-packages installs it), into dir/name.{crt,key}.
 */
export function selfSignedCert(dir: string, name: string): SelfSigned {
  const certFile = join(dir, `${name}.crt`);
  const keyFile = join(dir, `${name}.key`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      `/CN=kproxy-test-${name}`,
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ],
    { stdio: 'ignore' },
  );
  const cert = readFileSync(certFile, 'utf8');
  return { certFile, keyFile, cert, fingerprint: new X509Certificate(cert).fingerprint256 };
}

/**
 * installPair writes pair's key and certificate to keyFile and certFile, the key
 * first, as a writer rotating a served pair does (a test's first install too).
 */
export function installPair(pair: SelfSigned, certFile: string, keyFile: string): void {
  copyFileSync(pair.keyFile, keyFile);
  copyFileSync(pair.certFile, certFile);
}
