package dev.flatpull.fetcher.registry;

import dev.flatpull.config.RegistryEndpoint;
import java.io.IOException;
import java.nio.file.Files;
import java.security.cert.X509Certificate;
import okhttp3.OkHttpClient;
import okhttp3.tls.Certificates;
import okhttp3.tls.HandshakeCertificates;
import okhttp3.tls.HeldCertificate;

/**
 * TLS for an endpoint whose {@code hosts.toml} names a private CA ({@code ca}: trusted besides the platform's roots)
 * or a client certificate ({@code client}), as containerd reads them: in-house registries and mirrors commonly need
 * both. Nothing is silently dropped: a file that does not hold what its key says is an error naming the key.
 */
final class EndpointTls {
  private EndpointTls() {}

  static OkHttpClient derive(OkHttpClient base, RegistryEndpoint endpoint) throws IOException {
    HandshakeCertificates.Builder b = new HandshakeCertificates.Builder().addPlatformTrustedCertificates();
    for (var ca : endpoint.ca()) {
      String pem = Files.readString(ca);
      int found = 0;
      for (String block : pem.split("(?=-----BEGIN CERTIFICATE-----)")) {
        if (block.contains("-----BEGIN CERTIFICATE-----")) {
          b.addTrustedCertificate(decode(block, "ca", ca));
          found++;
        }
      }
      if (found == 0) {
        throw new IOException("hosts.toml ca " + ca + " for " + endpoint.base() + " holds no PEM certificate");
      }
    }
    for (RegistryEndpoint.ClientCertificate c : endpoint.clients()) {
      String pem = Files.readString(c.certificate()) + "\n"
          + (c.key().isPresent() ? Files.readString(c.key().get()) : "");
      try {
        b.heldCertificate(HeldCertificate.decode(pem));
      } catch (IllegalArgumentException e) {
        throw new IOException("hosts.toml client " + c.certificate() + c.key().map(k -> ", " + k).orElse("") + " for "
            + endpoint.base() + ": not a PEM certificate with its PKCS#8 key (" + e.getMessage() + ")", e);
      }
    }
    HandshakeCertificates tls = b.build();
    return base.newBuilder().sslSocketFactory(tls.sslSocketFactory(), tls.trustManager()).build();
  }

  private static X509Certificate decode(String pem, String key, java.nio.file.Path file) throws IOException {
    try {
      return Certificates.decodeCertificatePem(pem);
    } catch (IllegalArgumentException e) {
      throw new IOException("hosts.toml " + key + " " + file + ": not a PEM certificate (" + e.getMessage() + ")", e);
    }
  }
}
