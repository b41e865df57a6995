/**
 * Runtime images (docs/runtime-images.md): the pages a service version reads until it is ready, packed in
 * first-access order into one blob of independently decodable zstd frames with an index, published as an OCI
 * artifact whose subject is the image manifest. {@link dev.flatpull.runtimeimage.RuntimeImageFormat} reads and writes
 * the blob, {@link dev.flatpull.runtimeimage.RuntimeImageBuilder} makes one from a trace,
 * {@link dev.flatpull.runtimeimage.ImageBinding} checks one against its image, {@link
 * dev.flatpull.runtimeimage.RuntimeImageDecoder} yields its verified content, and {@link
 * dev.flatpull.runtimeimage.RuntimeImagePublisher} pushes, lists and removes them.
 */
package dev.flatpull.runtimeimage;
