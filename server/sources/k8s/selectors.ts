import { LABEL_HEADLESS, LABEL_SERVICE_PROXY_NAME } from '../../proxy/kube-objects.ts';

/**
 * The list/watch selectors kproxy's informers use. kube-proxy skips Services and
 * EndpointSlices that another proxy owns (service.kubernetes.io/service-proxy-name)
 * or that are headless (DNS serves those; the EndpointSlice controller copies the
 * headless label onto their slices), and Services without a cluster IP.
 * Filtering on the server keeps those objects out of memory altogether.
 */
export const PROXY_LABEL_SELECTOR = `!${LABEL_SERVICE_PROXY_NAME},!${LABEL_HEADLESS}`;

/** SERVICE_FIELD_SELECTOR: headless Services (clusterIP None) have nothing to proxy. */
export const SERVICE_FIELD_SELECTOR = 'spec.clusterIP!=None';

/** nodeFieldSelector watches only this node's Node object. */
export function nodeFieldSelector(nodeName: string): string {
  return `metadata.name=${nodeName}`;
}

/** Watch paths of the resources (cluster-wide). */
export const SERVICES_PATH = '/api/v1/services';
export const ENDPOINT_SLICES_PATH = '/apis/discovery.k8s.io/v1/endpointslices';
export const NODES_PATH = '/api/v1/nodes';
export const SERVICE_CIDRS_PATH = '/apis/networking.k8s.io/v1/servicecidrs';
